//! `ordo-verify explore`: stateright's Explorer web UI on a protocol model, so that a user can
//! step through a mutant's counterexample in a browser.
//!
//! The Explorer explores on demand; [`serve`] asks it to run to completion at once, so the
//! counterexample is listed under the property [`SAFE`] (as a link to its steps) by the time the
//! page is loaded, and prints the link to the shortest counterexample's steps.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use ordo::mutation::Mutant;
use stateright::{Checker, Model};
use thiserror::Error;

use crate::interval::Variant;
use crate::model::{Protocol, SAFE, TransitionSystem};
use crate::suite::{Bound, ModelError};

/// The Explorer could not start.
#[derive(Debug, Error)]
pub enum ExploreError {
    /// The model does not exist or the bound is bad.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// Not a model name.
    #[error("unknown model `{0}`: one of oac, interval")]
    UnknownModel(String),
    /// The port is taken (or not ours to bind).
    #[error("cannot listen on localhost:{port}: {source}")]
    Port {
        /// The port asked for.
        port: u16,
        /// Why binding failed.
        source: std::io::Error,
    },
}

/// Serve the Explorer for `model` (`oac`: STE computed by the device, or `interval`: the
/// single-word dispatcher) at `bound`, with `mutant` on, at `http://localhost:PORT/`, until the
/// process is killed. Returns only on error.
pub fn serve(
    bound: &Bound,
    model: &str,
    mutant: Option<Mutant>,
    port: u16,
) -> Result<(), ExploreError> {
    match model {
        "oac" => serve_model(bound.oac(mutant)?, port),
        "interval" => serve_model(bound.interval(Variant::SingleWord, mutant)?, port),
        other => Err(ExploreError::UnknownModel(other.to_string())),
    }
}

fn serve_model<T: TransitionSystem>(sys: T, port: u16) -> Result<(), ExploreError> {
    // stateright's server panics when it cannot bind: try first, for a typed error.
    drop(
        TcpListener::bind(("localhost", port))
            .map_err(|source| ExploreError::Port { port, source })?,
    );
    let model = Protocol(sys);
    // The shortest counterexample, found by a breadth-first search of the same model; its
    // encoding (action indices from the initial state) is the Explorer's address of its steps.
    let found = model.clone().checker().spawn_bfs().join().discovery(SAFE);
    match &found {
        Some(path) => println!(
            "counterexample ({} steps): http://localhost:{port}/#/steps/{}",
            path.clone().into_actions().len(),
            path.encode(&model)
        ),
        None => println!("no counterexample: the property `safe` holds in every reachable state"),
    }
    // The Explorer searches on demand; ask it to run to completion as soon as it listens, so
    // that the property lists its discovery when the page loads.
    std::thread::spawn(move || {
        for _ in 0..100 {
            if let Ok(mut s) = TcpStream::connect(("localhost", port)) {
                let rq = "POST /.runtocompletion HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                let mut reply = String::new();
                if s.write_all(rq.as_bytes()).is_ok() && s.read_to_string(&mut reply).is_ok() {
                    println!("Explorer: http://localhost:{port}/");
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("the Explorer did not answer on localhost:{port}");
    });
    // Blocks for as long as the server runs.
    model.checker().serve(("localhost", port));
    Ok(())
}
