//! Text cut to a length: messages quoted from the StorageOS API (an error body may be
//! megabytes). The controller kit has the same rule for event notes; the client depends on no
//! Kubernetes crate for it.

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
        let long = "é".repeat(3000);
        let cut = truncated(&long, 1024);
        assert!(cut.len() <= 1024, "{}", cut.len());
        assert!(cut.ends_with(" …(truncated)") && cut.starts_with("éé"));
        // No room even for the marker: the marker alone.
        assert_eq!(truncated("abcdef", 3), " …(truncated)");
    }
}
