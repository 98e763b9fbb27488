//! `kge eval` checks the memory it will hold before it loads a save, and refuses with the
//! figures (status 2, as a training run's refusal) what does not fit: never an abort by the allocator or the kernel.

mod common;
use common::{err, kge, out, s, temp};

#[test]
fn eval_refuses_a_save_that_does_not_fit_its_memory_naming_the_figures() {
    let dir = temp("eval-memory");
    let save = dir.join("emb");
    let run = ["--dataset", "nations", "--dim", "8", "--mode", "sync", "--epochs", "1"];
    let o = kge(&[&run[..], &["--save", s(&save)]].concat());
    assert!(o.status.success(), "{}", err(&o));
    let eval = ["eval", "--dataset", "nations", "--load", s(&save)];
    // 64 KiB: less than the full ranking's scores of two query blocks against 14 entities
    // per thread plus a thread's stack.
    let o = kge(&[&eval[..], &["--memory-limit", "65536"]].concat());
    // Status 2, as a training run's memory refusal: an option the run cannot have.
    assert_eq!(o.status.code(), Some(2), "{}{}", out(&o), err(&o));
    let e = err(&o);
    assert!(e.contains("needs about") && e.contains("64.0 KiB"), "{e}");
    assert!(out(&o).is_empty(), "nothing evaluated: {}", out(&o));
    // The same save within a budget that fits is evaluated.
    let o = kge(&[&eval[..], &["--memory-limit", "1G"]].concat());
    assert!(o.status.success(), "{}", err(&o));
    assert!(out(&o).starts_with("test  MRR "), "{}", out(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}
