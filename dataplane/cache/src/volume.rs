//! One cached volume.
