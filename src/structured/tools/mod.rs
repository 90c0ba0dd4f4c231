//! Tool calling (filled in below).
