//! Benchmarks behind `gangway bench`.
