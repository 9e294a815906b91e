//! A cache device shared by cached volumes (see `docs/cache-format.md`).
