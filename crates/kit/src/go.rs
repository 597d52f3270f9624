//! Go standard-library parsing that inputs written for the Go originals rely on (annotations
//! and labels hold Go-style booleans).

/// Go's `strconv.ParseBool`: `1 t T TRUE true True` and `0 f F FALSE false False`; anything
/// else is None.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::parse_bool;

    #[test]
    fn accepts_exactly_what_go_accepts() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_bool(t), Some(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_bool(f), Some(false), "{f}");
        }
        for other in ["", "yes", "tRUE", " true", "2"] {
            assert_eq!(parse_bool(other), None, "{other:?}");
        }
    }
}
