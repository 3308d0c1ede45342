//! The HTTP side of `tenure serve`: read-only routes over the monitor's
//! latest overview, a bearer token when one is set, TLS when asked.
//!
//! | route | what |
//! |---|---|
//! | `/` | the page: every group's status (live) |
//! | `/groups/{group}` | the page of one group: owners map, lag chart, timeline (live) |
//! | `/metrics` | Prometheus text format |
//! | `/v1/groups` | every group as JSON (an `Overview`) |
//! | `/v1/groups/{group}` | one group as JSON (a `GroupHealth`) |
//! | `/v1/events[?group=G]` | server-sent events: the summary, or one group, at every change |
//! | `/healthz` | 200 while the store is watched, 503 and why otherwise (no token needed) |

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use tenure_admin::overview::Overview;
use tenure_admin::Monitor;
use tokio::sync::watch;

use crate::error::Failure;

use super::{metrics, page};

/// The cookie the page keeps the token in, once given as `?token=`.
const TOKEN_COOKIE: &str = "tenure_token";

/// What every handler reads.
#[derive(Clone)]
struct App {
    updates: watch::Receiver<Arc<Overview>>,
    token: Option<Arc<str>>,
}

impl App {
    fn overview(&self) -> Arc<Overview> {
        self.updates.borrow().clone()
    }
}

/// A TLS server configuration from `--tls-cert` and `--tls-key`.
#[cfg(feature = "serve-tls")]
pub type TlsConfig = Arc<rustls::ServerConfig>;

/// Without the `serve-tls` feature there is no TLS to configure.
#[cfg(not(feature = "serve-tls"))]
pub type TlsConfig = Infallible;

/// Reads the certificate chain and key of `--tls-cert` and `--tls-key`.
#[cfg(feature = "serve-tls")]
pub fn tls_config(cert: &Path, key: &Path) -> Result<TlsConfig, Failure> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let bad = |path: &Path, detail: String| Failure::ServeTls {
        path: path.to_owned(),
        detail,
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| bad(cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(bad(cert, "no certificate in it".to_owned()));
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| bad(key, e.to_string()))?;
    Ok(Arc::new(config))
}

/// Without the `serve-tls` feature, `--tls-cert` is refused.
#[cfg(not(feature = "serve-tls"))]
pub fn tls_config(cert: &Path, _key: &Path) -> Result<TlsConfig, Failure> {
    Err(Failure::ServeTls {
        path: cert.to_owned(),
        detail: "this tenure was built without the `serve-tls` feature".to_owned(),
    })
}

/// The routes.
fn router(app: App) -> Router {
    Router::new()
        .route("/", get(index_page))
        .route("/groups/{group}", get(group_page))
        .route("/assets/page.js", get(script))
        .route("/assets/page.css", get(style))
        .route("/metrics", get(metrics_text))
        .route("/v1/groups", get(groups_json))
        .route("/v1/groups/{group}", get(group_json))
        .route("/v1/events", get(events))
        .route_layer(middleware::from_fn_with_state(app.clone(), authorize))
        // Outside the token: what a load balancer probes.
        .route("/healthz", get(healthz))
        .with_state(app)
}

/// Serves until Ctrl-C or SIGTERM; the monitor stops with it.
pub async fn serve(
    listener: tokio::net::TcpListener,
    monitor: Monitor,
    token: Option<String>,
    tls: Option<TlsConfig>,
) -> Result<(), Failure> {
    let app = App {
        updates: monitor.updates(),
        token: token.map(Arc::from),
    };
    let router = router(app);
    match tls {
        None => axum::serve(listener, router)
            .with_graceful_shutdown(shutdown())
            .await
            .map_err(Failure::Serve),
        #[cfg(feature = "serve-tls")]
        Some(config) => serve_tls(listener, router, config).await,
        #[cfg(not(feature = "serve-tls"))]
        Some(never) => match never {},
    }
}

/// Serves HTTPS: each connection's handshake and requests on a task of
/// its own, so a slow client holds only its own.
#[cfg(feature = "serve-tls")]
async fn serve_tls(
    listener: tokio::net::TcpListener,
    router: Router,
    config: TlsConfig,
) -> Result<(), Failure> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::service::TowerToHyperService;

    /// How long a client may take over its TLS handshake.
    const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let stop = shutdown();
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut stop => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of descriptors, say: wait a little rather than spin.
                Err(error) => {
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (acceptor, router) = (acceptor.clone(), router.clone());
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let service = TowerToHyperService::new(router);
            let served = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .await;
            if let Err(error) = served {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
}

async fn shutdown() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}

/// Lets a request through with the right token: `Authorization: Bearer`,
/// the page's cookie, or `?token=` (which also sets the cookie, so that
/// the page's own requests carry it).
async fn authorize(State(app): State<App>, request: Request, next: Next) -> Response {
    let Some(expected) = app.token.as_deref() else {
        return next.run(request).await;
    };
    let headers = request.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let cookie = cookie_token(headers);
    let query = request.uri().query().and_then(query_token);
    let given = bearer.or(cookie.as_deref()).or(query.as_deref());
    if !given.is_some_and(|given| same(given.as_bytes(), expected.as_bytes())) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a token is needed: Authorization: Bearer TOKEN, or ?token=TOKEN on the page\n",
        )
            .into_response();
    }
    let from_query = query.is_some() && bearer.is_none();
    let mut response = next.run(request).await;
    if from_query {
        let cookie = format!("{TOKEN_COOKIE}={expected}; HttpOnly; SameSite=Strict; Path=/");
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().insert(header::SET_COOKIE, value);
        }
    }
    response
}

fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == TOKEN_COOKIE).then(|| value.to_owned())
        })
}

fn query_token(query: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        (name == "token").then(|| value.to_owned())
    })
}

/// Compares in time that does not depend on where the first difference
/// is.
fn same(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

async fn index_page(State(app): State<App>) -> Html<String> {
    Html(page::index(&app.overview()))
}

async fn group_page(State(app): State<App>, UrlPath(group): UrlPath<String>) -> Response {
    let overview = app.overview();
    match overview.group(&group) {
        Some(health) => Html(page::group(&overview, health)).into_response(),
        None => not_watched(&group),
    }
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        page::SCRIPT,
    )
}

async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        page::STYLE,
    )
}

async fn metrics_text(State(app): State<App>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics::render(&app.overview()),
    )
}

async fn groups_json(State(app): State<App>) -> Json<Overview> {
    Json(Overview::clone(&app.overview()))
}

async fn group_json(State(app): State<App>, UrlPath(group): UrlPath<String>) -> Response {
    match app.overview().group(&group) {
        Some(health) => Json(health.clone()).into_response(),
        None => not_watched(&group),
    }
}

fn not_watched(group: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        format!("group {group:?} is not watched (see /v1/groups)\n"),
    )
        .into_response()
}

async fn healthz(State(app): State<App>) -> Response {
    match &app.overview().store_error {
        None => (StatusCode::OK, "ok\n").into_response(),
        Some(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the store cannot be watched: {error}\n"),
        )
            .into_response(),
    }
}

/// `/v1/events`'s parameters.
#[derive(Deserialize)]
struct EventsQuery {
    group: Option<String>,
}

/// Server-sent events: at once and after every change, the summary of
/// every group (`summary` events) or one group (`group` events). Each
/// client reads the latest overview when it is ready for the next: a slow
/// one skips overviews and never holds anything up.
async fn events(
    State(app): State<App>,
    Query(query): Query<EventsQuery>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut updates = app.updates.clone();
    updates.mark_changed();
    let events = stream::unfold((updates, query.group), |(mut updates, group)| async move {
        updates.changed().await.ok()?;
        let overview = updates.borrow_and_update().clone();
        let event = match &group {
            Some(name) => match overview.group(name) {
                Some(health) => Event::default().event("group").json_data(health),
                None => Event::default()
                    .event("missing")
                    .json_data(serde_json::json!({ "group": name })),
            },
            None => Event::default()
                .event("summary")
                .json_data(page::summary(&overview)),
        };
        let event = event.unwrap_or_else(|_| Event::default().event("error"));
        Some((Ok(event), (updates, group)))
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secre", b"secret"));
    }

    #[test]
    fn the_token_is_found_in_the_query_and_the_cookie() {
        assert_eq!(query_token("a=1&token=x"), Some("x".to_owned()));
        assert_eq!(query_token("a=1"), None);
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("other=1; tenure_token=abc"),
        );
        assert_eq!(cookie_token(&headers), Some("abc".to_owned()));
    }
}
