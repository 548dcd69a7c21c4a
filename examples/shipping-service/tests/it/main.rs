//! The shipping service as its operators run it: several processes on the partitions, its
//! health endpoint, concurrent starts.

mod concurrent_start;
mod endpoint;
mod processes;
