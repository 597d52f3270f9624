//! Following the client CA file: a ConfigMap volume is updated in place when the ConfigMap
//! changes (within the kubelet's sync period), so a rotated CA reaches the server without a
//! restart. An unreadable or invalid new file is logged and the CAs in use stay.

use std::path::PathBuf;
use std::time::Duration;

use super::ClientAuth;

/// How often the file is read again.
pub const RECHECK: Duration = Duration::from_secs(30);

/// What to do with the file's content `now`, given the content in use `last`: None when it is
/// unchanged, else the result of loading it into `clients`.
pub fn take(clients: &ClientAuth, last: &[u8], now: &[u8]) -> Option<Result<(), super::Error>> {
    (now != last).then(|| clients.reload(now))
}

/// Reads `path` every [`RECHECK`] until the process ends and loads a changed content into
/// `clients`; `initial` is what the server started with.
pub async fn follow(path: PathBuf, initial: Vec<u8>, clients: ClientAuth) {
    let mut last = initial;
    loop {
        tokio::time::sleep(RECHECK).await;
        let now = match std::fs::read(&path) {
            Ok(now) => now,
            Err(e) => {
                tracing::warn!(ca = %path.display(), error = %e, "cannot read the webhook client CA; keeping the one in use");
                continue;
            }
        };
        match take(&clients, &last, &now) {
            None => {}
            Some(Ok(())) => {
                tracing::info!(ca = %path.display(), "the webhook client CA changed; the next handshakes use the new one");
                last = now;
            }
            Some(Err(e)) => {
                tracing::warn!(ca = %path.display(), error = %e, "the webhook client CA changed to something unusable; keeping the one in use");
                last = now;
            }
        }
    }
}
