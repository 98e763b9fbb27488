//! `kge_roofline`'s mode table on a small graph: each mode's core time per positive is printed
//! beside its multiple of the unskippable sum (issue 34's roofline ratio), and the last row is
//! the floor, sync with its step on one thread, unless `--no-floor` leaves it out.
#![cfg(not(ordo_loom))]

use std::process::Command;

/// The table's rows: the mode's name and its cells, with the unskippable sum from the header.
fn table(extra: &[&str]) -> (f64, Vec<(String, Vec<String>)>) {
    let run = Command::new(env!("CARGO_BIN_EXE_kge_roofline"))
        .args(["--dataset", "nations", "--dim", "8", "--batch-size", "64", "--negatives", "8"])
        .args(["--chunk", "8", "--epochs", "1", "--modes", "sync,oac", "--reps", "1"])
        .args(extra)
        .output()
        .expect("the binary runs");
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let header = out.lines().find(|l| l.starts_with("| mode |")).expect("the mode table");
    let sum = header
        .split("x the unskippable sum (")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|s| s.parse::<f64>().ok())
        .expect("the header names the sum");
    let rows = out
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| mode |"))
        .map(|l| {
            let cells: Vec<String> =
                l.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect();
            (cells[0].clone(), cells[1..].to_vec())
        })
        .collect();
    (sum, rows)
}

#[test]
fn each_mode_is_a_multiple_of_the_unskippable_sum_and_the_floor_comes_last() {
    let (sum, rows) = table(&[]);
    assert!(sum > 0.0);
    let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["sync", "oac", "sync, step on one thread (floor)"]);
    for (name, cells) in &rows {
        // Cells after the name: triples/s, two bound fractions, of the step alone, core-us per
        // positive, the multiple of the sum, the all-cores ceiling and the fraction of it.
        let core_us: f64 = cells[4].parse().expect("core time measured");
        let multiple: f64 = cells[5].parse().expect("a multiple");
        // Both are printed rounded to two decimals.
        let want = core_us / sum;
        let slack = 0.006 * (1.0 + want) + 0.005 * core_us / (sum * sum);
        assert!((multiple - want).abs() <= slack, "{name}: {multiple} against {want}");
    }
}

#[test]
fn no_floor_leaves_the_floor_row_out() {
    let (_, rows) = table(&["--no-floor"]);
    let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["sync", "oac"]);
}
