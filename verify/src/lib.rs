//! ordo-verify: checkers of ordo's protocols.

#![warn(missing_docs)]
