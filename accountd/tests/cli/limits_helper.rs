//! `accountd slurm-limits-helper`, the governor's limits helper: its protocol, without Slurm.

use super::*;

#[test]
fn the_limits_helper_answers_each_line_and_ends_with_its_input() {
    // Lines that are not CLUSTER<TAB>ACCOUNT<TAB>GRPTRES are answered without touching Slurm;
    // the helper ends when the governor closes its end of the pipe.
    let mut child = Command::new(BIN)
        .arg("slurm-limits-helper")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"one field\ntwo\tfields\n").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    for line in lines {
        assert!(
            line.starts_with("err not CLUSTER<TAB>ACCOUNT<TAB>GRPTRES"),
            "{text}"
        );
    }
}
