//! Text that goes where its length is limited: event notes (the apiserver rejects an
//! events.k8s.io note over 1 KiB) and messages quoted from another server.

/// The longest note an events.k8s.io Event may have (the apiserver's `NoteLengthLimit`).
pub const EVENT_NOTE_LIMIT: usize = 1024;

/// What is appended to text that was cut.
const CUT: &str = " …(truncated)";

/// `text` cut to at most `max` bytes on a character boundary, ending in " …(truncated)" when it
/// was cut; `text` itself when it fits.
pub fn truncated(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let room = max.saturating_sub(CUT.len());
    let end = (0..=room).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
    format!("{}{CUT}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_on_a_character_boundary_and_marked() {
        assert_eq!(truncated("short", 10), "short");
        let cut = truncated(&"é".repeat(3000), EVENT_NOTE_LIMIT);
        assert!(cut.len() <= EVENT_NOTE_LIMIT, "{}", cut.len());
        assert!(cut.ends_with(" …(truncated)") && cut.starts_with("éé"));
    }
}
