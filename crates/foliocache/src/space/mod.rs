//! Address spaces (the `mm_struct` analog) and the tracking of who maps a large folio.
//!
//! Being built: [`rmap_id`] (rmap IDs and the exact sub-ID construction) comes first.

pub mod rmap;
pub mod rmap_id;
