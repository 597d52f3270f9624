//! Incremental reading of task pod logs and the completion-word check.
//!
//! The Go operator streamed every pod's whole log every 10 s. Here each pod has a cursor: logs
//! are requested with `timestamps=true` and `sinceTime` = the second of the last line read, so a
//! poll transfers only the new lines plus the few of that last second, which the cursor skips.
//! A pod that printed the word is never read again.
//!
//! Matching: the word must appear as a whole token of a line (bounded by whitespace or the line's
//! ends), not as a raw substring as in the Go operator. The task prints the word on its own (`echo
//! done`); a substring match would complete a cleanup early on a line such as `rm: can't remove
//! '/var/lib/storageos/abandoned'`.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, LogParams};

use super::daemonset::CONTAINER;

/// Upper bound of one log read, so a chatty task cannot make the operator buffer a huge log.
pub const READ_LIMIT_BYTES: i64 = 1024 * 1024;

/// How far one pod's log has been read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogCursor {
    /// Timestamp of the last line read.
    last: Option<Timestamp>,
    /// Lines read that carry exactly `last` (several lines can share a timestamp).
    seen_at_last: usize,
    /// The pod printed the completion word.
    pub finished: bool,
}

/// Whether `word` occurs in `line` bounded by whitespace or the ends of the line.
pub fn contains_token(line: &str, word: &str) -> bool {
    let word = word.trim();
    if word.is_empty() {
        return false;
    }
    line.match_indices(word).any(|(i, m)| {
        let before = line.get(..i).and_then(|s| s.chars().next_back());
        let after = line.get(i + m.len()..).and_then(|s| s.chars().next());
        before.is_none_or(char::is_whitespace) && after.is_none_or(char::is_whitespace)
    })
}

impl LogCursor {
    /// What to ask the apiserver for next: `sinceTime` is whole seconds (and inclusive), so ask
    /// from the second of the last line read and skip what was already seen.
    pub fn since(&self) -> Option<Timestamp> {
        self.last.and_then(|t| Timestamp::from_second(t.as_second()).ok())
    }

    /// Consumes a log chunk read with `timestamps=true` from [`Self::since`] and returns whether
    /// the word has been seen. `truncated` says the read hit its byte limit, so its last line may
    /// be cut: that line is left for the next read.
    pub fn feed(&mut self, chunk: &str, word: &str, truncated: bool) -> bool {
        if self.finished {
            return true;
        }
        let mut lines: Vec<&str> = chunk.split('\n').collect();
        // The element after the last newline is empty, or a line still being written/cut off.
        let mut cut = None;
        if let Some(last) = lines.pop() {
            match truncated {
                false if !last.is_empty() => lines.push(last),
                true => cut = Some(last),
                false => {}
            }
        }
        let mut skipped_at_last = 0;
        let mut progressed = false;
        for raw in lines {
            let (ts, content) = split_line(raw);
            match (ts, self.last) {
                (Some(ts), Some(last)) if ts < last => continue,
                (Some(ts), Some(last)) if ts == last => {
                    if skipped_at_last < self.seen_at_last {
                        skipped_at_last += 1;
                        continue;
                    }
                    self.seen_at_last += 1;
                    skipped_at_last += 1;
                }
                (Some(ts), _) => {
                    self.last = Some(ts);
                    self.seen_at_last = 1;
                    skipped_at_last = 1;
                }
                // A line without a timestamp cannot move the cursor; it is only checked.
                (None, _) => {}
            }
            progressed = true;
            if contains_token(content, word) {
                self.finished = true;
                return true;
            }
        }
        if let Some(cut) = cut.filter(|_| !progressed) {
            // Nothing new fit in the byte limit: one line (or one second of output) is longer
            // than a whole read, and every read from this second would return the same bytes.
            // Check what arrived of it (without its last, possibly cut, token), then move on
            // to the next second; the rest of this second is not read.
            let (ts, content) = split_line(cut);
            let whole = content.rsplit_once(char::is_whitespace).map_or("", |(w, _)| w);
            if contains_token(whole, word) {
                self.finished = true;
                return true;
            }
            if let Some(next) = ts
                .or(self.last)
                .and_then(|t| Timestamp::from_second(t.as_second() + 1).ok())
            {
                self.last = Some(next);
                self.seen_at_last = 0;
            }
        }
        false
    }
}

/// A log line read with `timestamps=true`: its timestamp, if it has one, and its content.
fn split_line(raw: &str) -> (Option<Timestamp>, &str) {
    let line = raw.strip_suffix('\r').unwrap_or(raw);
    match line.split_once(' ') {
        Some((ts, content)) => match ts.parse::<Timestamp>() {
            Ok(ts) => (Some(ts), content),
            Err(_) => (None, line),
        },
        None => match line.parse::<Timestamp>() {
            Ok(ts) => (Some(ts), ""),
            Err(_) => (None, line),
        },
    }
}

/// Reads what is new in the task container's log of `pod` and advances `cursor`. Returns
/// whether the pod has printed `word`.
pub async fn read_new(pods: &Api<Pod>, pod: &str, word: &str, cursor: &mut LogCursor) -> Result<bool, kube::Error> {
    if cursor.finished {
        return Ok(true);
    }
    let params = LogParams {
        container: Some(CONTAINER.into()),
        timestamps: true,
        since_time: cursor.since(),
        limit_bytes: Some(READ_LIMIT_BYTES),
        ..Default::default()
    };
    let chunk = pods.logs(pod, &params).await?;
    let truncated = i64::try_from(chunk.len()).unwrap_or(i64::MAX) >= READ_LIMIT_BYTES;
    Ok(cursor.feed(&chunk, word, truncated))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const T1: &str = "2026-01-01T00:00:01.100000000Z";
    const T2: &str = "2026-01-01T00:00:01.700000000Z";
    const T3: &str = "2026-01-01T00:00:02.000000001Z";

    #[test]
    fn the_word_must_be_a_whole_token() {
        assert!(contains_token("done", "done"));
        assert!(contains_token("  done  ", "done"));
        assert!(contains_token("cleanup done", "done"));
        assert!(contains_token("step\tdone\there", "done"));
        assert!(contains_token("all finished now", "all finished"));
        assert!(!contains_token("undone", "done"));
        assert!(!contains_token(
            "rm: can't remove '/var/lib/storageos/abandoned'",
            "done"
        ));
        assert!(!contains_token("done.", "done"));
        assert!(!contains_token("", "done"));
        assert!(!contains_token("anything", "  "));
        // A later occurrence counts even when the first is part of a longer word.
        assert!(contains_token("doneness done", "done"));
    }

    #[test]
    fn a_fresh_cursor_reads_from_the_start() {
        let mut c = LogCursor::default();
        assert_eq!(c.since(), None);
        assert!(!c.feed(&format!("{T1} removing /var/lib/storageos\n"), "done", false));
        assert_eq!(c.since().unwrap().to_string(), "2026-01-01T00:00:01Z");
        assert!(c.feed(&format!("{T1} removing\n{T2} done\n"), "done", false));
        assert!(c.finished);
        // Once finished it stays finished, whatever comes.
        assert!(c.feed("", "done", false));
    }

    #[test]
    fn lines_already_read_in_the_overlapping_second_are_skipped() {
        let mut c = LogCursor::default();
        // Two lines with the same timestamp, the second of which contains the word only in a
        // later read would be a double count; here the word appears in a skipped line.
        assert!(!c.feed(&format!("{T1} a\n{T2} b\n{T2} c\n"), "x", false));
        assert_eq!((c.last, c.seen_at_last), (Some(T2.parse().unwrap()), 2));
        // The next read starts at second 1 again: T1 and both T2 lines are skipped, so a word
        // in them would not be re-examined; the new T2 line and T3 are read.
        assert!(!c.feed(&format!("{T1} x-ignored\n{T2} b\n{T2} c\n{T2} d\n"), "x", false));
        assert_eq!(c.seen_at_last, 3);
        assert!(!c.feed(&format!("{T1} a\n{T2} b\n{T2} c\n{T2} d\n{T3} e\n"), "x", false));
        assert_eq!((c.last, c.seen_at_last), (Some(T3.parse().unwrap()), 1));
        assert_eq!(c.since().unwrap().to_string(), "2026-01-01T00:00:02Z");
        assert!(c.feed(&format!("{T3} e\n{T3} x\n"), "x", false));
    }

    #[test]
    fn a_line_cut_by_the_byte_limit_is_read_again_next_time() {
        let mut c = LogCursor::default();
        assert!(!c.feed(&format!("{T1} a\n{T2} do"), "done", true));
        assert_eq!(c.last, Some(T1.parse().unwrap()));
        assert!(c.feed(&format!("{T1} a\n{T2} done\n"), "done", false));
    }

    #[test]
    fn a_line_longer_than_a_read_never_stalls_the_cursor() {
        let mut c = LogCursor::default();
        let long = format!("{T1} {}", "x".repeat(2 << 20));
        // Each read returns the first MiB of the long line only.
        let first = &long[..READ_LIMIT_BYTES as usize];
        assert!(!c.feed(first, "done", true));
        let since = c.since().unwrap();
        assert!(
            since > T1.parse::<Timestamp>().unwrap(),
            "the cursor must move past the long line"
        );
        // The next read starts after it and finds the word.
        assert!(c.feed(&format!("{T3} done\n"), "done", false));
        // The word inside a cut line counts only as a whole token before the cut.
        let mut c = LogCursor::default();
        assert!(c.feed(&format!("{T1} cleaning done {}", "y".repeat(64)), "done", true));
        let mut c = LogCursor::default();
        assert!(!c.feed(&format!("{T1} cleaning do"), "done", true));
    }

    #[test]
    fn a_last_line_without_newline_is_read_when_not_truncated() {
        let mut c = LogCursor::default();
        assert!(c.feed(&format!("{T1} done"), "done", false));
    }

    #[test]
    fn windows_line_endings_and_untimestamped_lines() {
        let mut c = LogCursor::default();
        assert!(!c.feed(&format!("{T1} working\r\n"), "done", false));
        assert!(c.feed("done\n", "done", false));
        assert_eq!(c.last, Some(T1.parse().unwrap()));
    }
}
