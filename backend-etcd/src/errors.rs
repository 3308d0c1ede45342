//! etcd's answers in the core's terms: which errors are answers, which
//! leave a request's outcome unknown, which say a lease is gone.

use tenure_core::{ClientError, StoreError};

/// Whether the server said that a lease does not exist.
pub(crate) fn lease_not_found(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(status) => {
            status.code() == tonic::Code::NotFound && status.message().contains("lease not found")
        }
        etcd_client::Error::LeaseKeepAliveError(message) => message.contains("lease not found"),
        _ => false,
    }
}

/// Whether etcd refused `error`'s request because the node it reached has
/// no leader (asked for with require-leader): the node did nothing with
/// it, and another node may answer.
pub(crate) fn no_leader(error: &etcd_client::Error) -> bool {
    matches!(
        error,
        etcd_client::Error::GRpcStatus(status)
            if status.code() == tonic::Code::Unavailable
                && status.message().contains("no leader")
    )
}

/// Whether the client refused to connect for the endpoints it was given
/// (rather than for a server that does not answer).
pub(crate) fn bad_endpoint(error: &etcd_client::Error) -> bool {
    matches!(
        error,
        etcd_client::Error::InvalidUri(_)
            | etcd_client::Error::InvalidArgs(_)
            | etcd_client::Error::EndpointError(_)
    )
}

/// Whether `error` is an answer (rather than a failure of the connection,
/// after which the request's outcome is unknown).
pub(crate) fn answered(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(status) => !matches!(
            status.code(),
            tonic::Code::Unavailable
                | tonic::Code::Unknown
                | tonic::Code::Cancelled
                | tonic::Code::DeadlineExceeded
                | tonic::Code::Internal
                | tonic::Code::Aborted
        ),
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => false,
        _ => true,
    }
}

/// Maps a client error to the core's terms.
///
/// Transport failures (and etcd's own "leader changed" / "no leader", which
/// are `Unavailable`) leave the request's outcome unknown: ConnectionLoss.
/// A lease the server does not know is an expired session.
pub(crate) fn store_error(error: etcd_client::Error) -> StoreError {
    if lease_not_found(&error) {
        StoreError::SessionExpired
    } else if !answered(&error) {
        StoreError::ConnectionLoss
    } else if matches!(&error, etcd_client::Error::GRpcStatus(status) if status.code() == tonic::Code::PermissionDenied)
    {
        StoreError::Denied {
            detail: format!(
                "etcd refused a request on the group's keys: the user lacks rights on the \
                 prefix (EtcdSecurity::user): {error}"
            ),
        }
    } else {
        StoreError::Other(ClientError::new(error))
    }
}
