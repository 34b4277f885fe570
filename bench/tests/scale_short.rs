//! The short form of `make bench-scale`, run by `make test`: small numbers, and only the
//! bounds that hold on any machine (the bench asserts them: at most one fencing key per hash
//! slot used, no waiter left behind once the clients have gone).

#[test]
fn bench_scale_quick_holds_its_bounds() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dlock-bench"))
        .args(["--scale", "--quick", "--no-write"])
        .output()
        .expect("run dlock-bench");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("fencing keys after 10000 fenced names"),
        "{text}"
    );
}
