//! Text that goes where its length is limited: event notes (the apiserver rejects an
//! events.k8s.io note over 1 KiB) and messages quoted from another server (a StorageOS error
//! body may be megabytes).

/// The longest note an events.k8s.io Event may have (the apiserver's `NoteLengthLimit`).
pub const EVENT_NOTE_LIMIT: usize = 1024;

/// `text` cut to at most `max` bytes on a character boundary, marked when it was cut (shared
/// with the StorageOS client).
pub use crate::storageos::text::truncated;
