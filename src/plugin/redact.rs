//! Redaction for the support bundle.
