//! StorageOS REST API client. (Stub: filled in by the client work.)
