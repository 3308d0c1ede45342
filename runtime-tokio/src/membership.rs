//! Static membership: a member id that is an instance identity. Its store
//! session (ZooKeeper session id and password, etcd lease) is kept in a
//! state file, so that a process restarting within the session timeout
//! resumes the session and finds its registration and claims where it left
//! them — with their fencing tokens: no partition moves and no other member
//! notices. Past the timeout the session is gone and the group rebalances,
//! as for any member.
//!
//! The file is locked (`flock`) for as long as the member runs: two
//! processes can never act for one session. A process that finds it locked
//! waits up to the session timeout for the previous one to exit, then fails
//! with [`StateFileError::Held`].
//!
//! The file holds the session's secret (ZooKeeper's session password):
//! whoever reads it can act as the member. It is created readable and
//! writable by its owner only (mode 0600), and a file that its group or
//! others can read or write is refused with [`StateFileError::Exposed`].

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::backend::SessionTicket;

/// How a member is a static member: where it keeps its session, and what
/// [`crate::MemberHandle::close`] does with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticMembership {
    path: PathBuf,
    leave_on_close: bool,
}

impl StaticMembership {
    /// Static membership with its state in the file at `path` (created if
    /// missing, in a directory that must exist): one file per member id,
    /// on a disk that survives the process (a restarted process must find
    /// it).
    pub fn new(path: impl Into<PathBuf>) -> StaticMembership {
        StaticMembership {
            path: path.into(),
            leave_on_close: false,
        }
    }

    /// Whether [`crate::MemberHandle::close`] leaves the group at once
    /// (releases every claim, deregisters and ends the session, as a
    /// dynamic member does: its partitions move now) rather than commit,
    /// stop, and leave the session to run out for the next process to
    /// resume. Default: `false`, as Kafka's static members skip LeaveGroup.
    pub fn leave_on_close(mut self, leave: bool) -> StaticMembership {
        self.leave_on_close = leave;
        self
    }

    /// The state file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a close leaves the group at once.
    pub fn leaves_on_close(&self) -> bool {
        self.leave_on_close
    }
}

/// Why the state file of a static member cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateFileError {
    /// It cannot be opened, read or written.
    #[error("static membership state file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// Another process holds it: a process of the same member runs, or has
    /// not exited yet.
    #[error(
        "static membership state file {path} is held by another process: another process of \
         member {member:?} runs (or did not exit within {waited:?}); stop it first"
    )]
    Held {
        /// The file.
        path: PathBuf,
        /// The member.
        member: String,
        /// How long the join waited for it.
        waited: Duration,
    },
    /// Its group or others may read or write it, and it holds the session's
    /// secret: whoever reads it can act as the member.
    #[error(
        "static membership state file {path} has mode {mode:04o}: it holds the session's secret \
         and must be readable by its owner only (chmod 600 {path})"
    )]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

/// The first line of a state file.
const HEADER: &str = "tenure static member, format 1";

/// An open, locked state file.
#[derive(Debug)]
pub(crate) struct StateFile {
    file: File,
    path: PathBuf,
    group: String,
    member: String,
}

impl StateFile {
    /// Opens and locks the state file of `member` of `group`, waiting up to
    /// `wait` for a previous process to let go of it.
    pub(crate) async fn open(
        membership: &StaticMembership,
        group: &str,
        member: &str,
        wait: Duration,
    ) -> Result<StateFile, StateFileError> {
        let path = membership.path.clone();
        let io = |source| StateFileError::Io {
            path: path.clone(),
            source,
        };
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(&path).map_err(io)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = file.metadata().map_err(io)?.permissions().mode() & 0o7777;
            if mode & 0o077 != 0 {
                return Err(StateFileError::Exposed { path, mode });
            }
        }
        let file = match file.try_lock() {
            Ok(()) => file,
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
            Err(std::fs::TryLockError::WouldBlock) => {
                // A lock is released when its process exits: wait for that
                // in a thread (the lock call blocks), for at most `wait`. A
                // lock taken after the wait ended is dropped with the file.
                let locking = tokio::task::spawn_blocking(move || file.lock().map(|()| file));
                match tokio::time::timeout(wait, locking).await {
                    Ok(Ok(Ok(file))) => file,
                    Ok(Ok(Err(e))) => return Err(io(e)),
                    Ok(Err(e)) => return Err(io(std::io::Error::other(e))),
                    Err(_) => {
                        return Err(StateFileError::Held {
                            path,
                            member: member.to_owned(),
                            waited: wait,
                        })
                    }
                }
            }
        };
        Ok(StateFile {
            file,
            path: membership.path.clone(),
            group: group.to_owned(),
            member: member.to_owned(),
        })
    }

    /// The session the file keeps for this group and member, if it keeps
    /// one. A file of another group or member, or one that cannot be read
    /// (a write cut short), keeps none: the member opens a new session.
    pub(crate) fn ticket(&mut self) -> Option<SessionTicket> {
        let mut text = String::new();
        if let Err(error) = self
            .file
            .seek(SeekFrom::Start(0))
            .and_then(|_| self.file.read_to_string(&mut text))
        {
            tracing::warn!(path = %self.path.display(), %error, "cannot read the static membership state file; opening a new session");
            return None;
        }
        if text.is_empty() {
            return None;
        }
        match parse(&text) {
            Some((group, member, ticket)) if group == self.group && member == self.member => {
                Some(ticket)
            }
            Some((group, member, _)) => {
                tracing::warn!(
                    path = %self.path.display(),
                    file_group = %group,
                    file_member = %member,
                    "the static membership state file is another member's; opening a new session"
                );
                None
            }
            None => {
                tracing::warn!(path = %self.path.display(), "the static membership state file cannot be read; opening a new session");
                None
            }
        }
    }

    /// Keeps `ticket` as the member's session, in place (a rename would
    /// leave the lock on the old file) and synced.
    pub(crate) fn save(&mut self, ticket: &SessionTicket) -> Result<(), StateFileError> {
        let text = format!(
            "{HEADER}\ngroup={}\nmember={}\nsession={}\nsecret={}\n",
            self.group,
            self.member,
            ticket.id,
            hex(&ticket.secret)
        );
        let written = self
            .file
            .set_len(0)
            .and_then(|()| self.file.seek(SeekFrom::Start(0)))
            .and_then(|_| self.file.write_all(text.as_bytes()))
            .and_then(|()| self.file.sync_data());
        written.map_err(|source| StateFileError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

fn parse(text: &str) -> Option<(String, String, SessionTicket)> {
    let mut lines = text.lines();
    if lines.next()? != HEADER {
        return None;
    }
    let mut field = |name: &str| {
        lines
            .next()?
            .strip_prefix(name)?
            .strip_prefix('=')
            .map(str::to_owned)
    };
    let group = field("group")?;
    let member = field("member")?;
    let id = field("session")?.parse().ok()?;
    let secret = unhex(&field("secret")?)?;
    Some((group, member, SessionTicket { id, secret }))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_path(name: &str) -> PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        std::env::temp_dir().join(format!("tenure-state-{name}-{nanos}"))
    }

    #[tokio::test]
    async fn a_ticket_is_kept_for_its_group_and_member_only() {
        let path = temp_path("kept");
        let membership = StaticMembership::new(&path);
        let ticket = SessionTicket {
            id: 0x1234_5678_9abc,
            secret: vec![0, 1, 0xfe, 0xff],
        };
        {
            let mut file = StateFile::open(&membership, "g", "m1", Duration::from_secs(1))
                .await
                .expect("open");
            assert_eq!(file.ticket(), None, "a new file keeps nothing");
            file.save(&ticket).expect("save");
            assert_eq!(file.ticket(), Some(ticket.clone()));
        }
        let mut again = StateFile::open(&membership, "g", "m1", Duration::from_secs(1))
            .await
            .expect("open again once the first let go");
        assert_eq!(again.ticket(), Some(ticket.clone()));
        drop(again);
        let mut other = StateFile::open(&membership, "g", "m2", Duration::from_secs(1))
            .await
            .expect("open");
        assert_eq!(
            other.ticket(),
            None,
            "another member's session is not resumed"
        );
        drop(other);
        std::fs::write(
            &path,
            "tenure static member, format 1\ngroup=g\nmember=m1\nsession=x\n",
        )
        .expect("write");
        let mut corrupt = StateFile::open(&membership, "g", "m1", Duration::from_secs(1))
            .await
            .expect("open");
        assert_eq!(corrupt.ticket(), None, "a corrupt file keeps nothing");
        let _ = std::fs::remove_file(&path);
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn the_file_is_the_owners_only_and_an_exposed_one_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let path = temp_path("mode");
        let membership = StaticMembership::new(&path);
        let file = StateFile::open(&membership, "g", "m1", Duration::from_secs(1))
            .await
            .expect("open");
        drop(file);
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "a new state file is its owner's only");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        match StateFile::open(&membership, "g", "m1", Duration::from_secs(1)).await {
            Err(error @ StateFileError::Exposed { mode: 0o644, .. }) => {
                let text = error.to_string();
                assert!(text.contains("chmod 600"), "{text}");
                assert!(text.contains(&path.display().to_string()), "{text}");
                assert!(text.contains("0644"), "{text}");
            }
            other => panic!("a 0644 state file must be refused, got {other:?}"),
        }
        let _ = std::fs::remove_file(&path);
    }

    #[tokio::test]
    async fn a_held_file_is_refused_after_the_wait() {
        let path = temp_path("held");
        let membership = StaticMembership::new(&path);
        let _first = StateFile::open(&membership, "g", "m1", Duration::from_secs(1))
            .await
            .expect("open");
        let second = StateFile::open(&membership, "g", "m1", Duration::from_millis(200)).await;
        match second {
            Err(StateFileError::Held { member, .. }) => assert_eq!(member, "m1"),
            other => panic!("expected Held, got {other:?}"),
        }
        let _ = std::fs::remove_file(&path);
    }

    #[tokio::test]
    async fn a_file_let_go_while_waiting_is_taken() {
        let path = temp_path("wait");
        let membership = StaticMembership::new(&path);
        let first = StateFile::open(&membership, "g", "m1", Duration::from_secs(1))
            .await
            .expect("open");
        let waiting = tokio::spawn({
            let membership = membership.clone();
            async move { StateFile::open(&membership, "g", "m1", Duration::from_secs(10)).await }
        });
        // The second waits on the lock: let the first go (as its process
        // would by exiting), and the second has it.
        tokio::task::yield_now().await;
        drop(first);
        waiting.await.expect("task").expect("taken once let go");
        let _ = std::fs::remove_file(&path);
    }
}
