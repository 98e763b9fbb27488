//! `kge_roofline`'s mode table on a small graph: each mode's core time per positive is printed
//! beside its multiple of the unskippable sum (issue 34's roofline ratio), the last row is the
//! floor, sync with its step on one thread, and each mode's multiple of the floor's core time
//! follows the table, unless `--no-floor` leaves both out.
#![cfg(not(ordo_loom))]

use std::process::Command;

/// What `kge_roofline` printed of its mode table.
struct Table {
    /// The unskippable sum, from the header.
    sum: f64,
    /// Each row: the mode's name and its other cells.
    rows: Vec<(String, Vec<String>)>,
    /// The line after the table: each mode's core time over the floor's.
    over_floor: Vec<(String, f64)>,
}

fn table(extra: &[&str]) -> Table {
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
    // `core time per positive over the floor's: sync 1.10x, oac 1.24x`, after the floor row.
    let over_floor = out
        .lines()
        .find_map(|l| l.strip_prefix("core time per positive over the floor's: "))
        .map(|rest| {
            rest.split(", ")
                .filter_map(|part| {
                    let (mode, x) = part.split_once(' ')?;
                    Some((mode.to_string(), x.strip_suffix('x')?.parse().ok()?))
                })
                .collect()
        })
        .unwrap_or_default();
    Table { sum, rows, over_floor }
}

/// Whether `printed` is `num / den`, all three as printed: rounded to two decimals.
fn is_ratio(printed: f64, num: f64, den: f64) -> bool {
    let want = num / den;
    (printed - want).abs() <= 0.006 * (1.0 + want) + 0.005 * num / (den * den)
}

#[test]
fn each_mode_is_a_multiple_of_the_unskippable_sum_and_the_floor_comes_last() {
    let Table { sum, rows, over_floor } = table(&[]);
    assert!(sum > 0.0);
    let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["sync", "oac", "sync, step on one thread (floor)"]);
    for (name, cells) in &rows {
        // Cells after the name: triples/s, two bound fractions, of the step alone, core-us per
        // positive, the multiple of the sum, the all-cores ceiling and the fraction of it.
        let core_us: f64 = cells[4].parse().expect("core time measured");
        let multiple: f64 = cells[5].parse().expect("a multiple");
        assert!(is_ratio(multiple, core_us, sum), "{name}: {multiple} against {core_us} / {sum}");
    }
    // Below the table, each mode's core time over the floor's.
    let core = |i: usize| rows[i].1[4].parse::<f64>().expect("core time");
    let floor = core(2);
    for (i, mode) in ["sync", "oac"].into_iter().enumerate() {
        let printed = over_floor.iter().find(|(m, _)| m == mode).map(|(_, x)| *x);
        assert!(
            printed.is_some_and(|x| is_ratio(x, core(i), floor)),
            "{mode}: {printed:?} against {} / {floor}",
            core(i)
        );
    }
}

#[test]
fn no_floor_leaves_the_floor_row_out() {
    let Table { rows, over_floor, .. } = table(&["--no-floor"]);
    let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["sync", "oac"]);
    assert!(over_floor.is_empty(), "no floor, no multiples of it: {over_floor:?}");
}
