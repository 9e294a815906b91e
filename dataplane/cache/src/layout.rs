//! The on-device format of a cache device (see `docs/cache-format.md`).
