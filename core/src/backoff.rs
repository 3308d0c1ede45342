//! Capped exponential backoff with jitter.
