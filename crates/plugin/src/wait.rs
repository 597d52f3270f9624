//! Waiting with progress: poll every two seconds, print a line on stderr (with the seconds
//! elapsed) each time what is seen changes, stop when done or after the timeout.

use std::future::Future;
use std::time::{Duration, Instant};

/// What one poll saw.
pub struct Look {
    /// A line on the state (None: nothing to show yet).
    pub line: Option<String>,
    /// Whether the wait is over.
    pub done: bool,
}

/// How a wait ended.
pub enum Waited {
    Done,
    /// The timeout passed; the last line seen.
    TimedOut {
        last: String,
    },
}

/// Polls `look` until it is done or `timeout` has passed, printing `[  Ns] label: line` on each
/// change.
pub async fn until<F, Fut, E>(label: &str, timeout: Duration, mut look: F) -> Result<Waited, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Look, E>>,
{
    let started = Instant::now();
    let mut last = String::from("nothing yet");
    loop {
        let seen = look().await?;
        if let Some(line) = seen.line
            && line != last
        {
            super::progress(format!("[{:>4}s] {label}: {line}", started.elapsed().as_secs()));
            last = line;
        }
        if seen.done {
            return Ok(Waited::Done);
        }
        if started.elapsed() > timeout {
            return Ok(Waited::TimedOut { last });
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
