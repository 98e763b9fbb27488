#![cfg(not(any(ordo_loom, ordo_shuttle)))]
