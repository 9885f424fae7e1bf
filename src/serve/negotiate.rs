//! Content negotiation (filled in below the milestone commit).
