use std::collections::HashMap;

use super::flags::FLAGS;
use super::*;

fn run(args: &[&str], env: &[(&str, &str)]) -> Result<Config, String> {
    let env: HashMap<&str, &str> = env.iter().copied().collect();
    let env = |name: &str| env.get(name).map(|value| value.to_string());
    match parse(args.iter().map(OsString::from), env)? {
        Parsed::Run(config) => Ok(*config),
        other => panic!("{other:?}"),
    }
}

/// Asserts that `args` with `env` are refused with a message containing `wanted`.
fn refused(args: &[&str], env: &[(&str, &str)], wanted: &str) {
    let error = run(args, env).unwrap_err();
    assert!(error.contains(wanted), "{args:?} {env:?}: {error}");
}

const BASE: [&str; 4] = [
    "--upstream",
    "http://127.0.0.1:9/mcp",
    "--principal",
    "none",
];

fn base_and(more: &[&'static str]) -> Vec<&'static str> {
    [&BASE[..], more].concat()
}

#[test]
fn durations_are_milliseconds_or_carry_a_unit() {
    assert_eq!(duration("250"), Ok(Duration::from_millis(250)));
    assert_eq!(duration("1500ms"), Ok(Duration::from_millis(1500)));
    assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
    assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
    for bad in ["", "s", "1.5s", "-1", "10h", "ten"] {
        assert!(duration(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn flags_win_over_the_environment_and_fall_back_to_it() {
    let env = [
        ("MCP_ADDR", "127.0.0.1:4000"),
        ("MCP_AUTO_AFTER_MS", "900,slow=5000"),
        ("MCP_TASK_TOOLS", "1"),
        ("MCP_FORWARD_HEADERS", "authorization, cookie"),
    ];
    let config = run(&BASE, &env).unwrap();
    assert_eq!(config.listen.port(), 4000);
    assert_eq!(config.auto_after, Duration::from_millis(900));
    assert_eq!(config.auto_after_of("slow"), Duration::from_secs(5));
    assert!(config.task_tools);
    assert_eq!(config.proxy.forward.len(), 2);
    let args = base_and(&[
        "--listen=127.0.0.1:5000",
        "--auto-after",
        "1s",
        "--auto-after",
        "x=2s",
        "--task-tools",
        "off",
    ]);
    let config = run(&args, &env).unwrap();
    assert_eq!(config.listen.port(), 5000);
    assert_eq!(config.auto_after, Duration::from_secs(1));
    assert_eq!(config.auto_after_of("x"), Duration::from_secs(2));
    assert_eq!(config.auto_after_of("slow"), Duration::from_secs(1));
    assert!(!config.task_tools);
}

#[test]
fn mistakes_name_the_flag_or_variable() {
    refused(&["--principal", "none"], &[], "--upstream");
    refused(&["--upstream", "http://h/mcp"], &[], "--principal");
    refused(&BASE, &[("MCP_TASK_TOOLS", "maybe")], "MCP_TASK_TOOLS");
    refused(&base_and(&["--nope", "1"]), &[], "--nope");
    refused(&base_and(&["--listen"]), &[], "--listen needs a value");
    refused(
        &base_and(&["--listen", "--store", "memory"]),
        &[],
        "--listen needs a value",
    );
    refused(&base_and(&["--drain-grace", "soon"]), &[], "--drain-grace");
    refused(&base_and(&["--listen", "a", "--listen", "b"]), &[], "twice");
    refused(
        &["--upstream", "https://h/mcp", "--principal", "none"],
        &[],
        "http://",
    );
    refused(
        &base_and(&["--jwt-secret", "k"]),
        &[],
        "only for --principal",
    );
    refused(&base_and(&["--auto-after", "=5s"]), &[], "names no tool");
    refused(&base_and(&["--store", "mysql://h/db"]), &[], "--store");
    let jwt = ["--upstream", "http://h/mcp", "--principal", "bearer-jwt"];
    refused(
        &[&jwt[..], &["--jwt-secret", "short"]].concat(),
        &[],
        "32 bytes",
    );
    refused(&jwt, &[], "--jwt-secret");
}

#[test]
fn the_help_lists_every_flag_with_its_variable() {
    let help = help();
    for flag in FLAGS {
        assert!(help.contains(&format!("--{} ", flag.name)), "{}", flag.name);
        assert!(
            help.contains(&format!("[env {}]", flag.env)),
            "{}",
            flag.env
        );
    }
}

#[test]
fn upstream_tasks_are_carried_by_default_under_a_key_of_length() {
    let config = run(&BASE, &[]).unwrap();
    assert!(config.federation.upstream_tasks);
    assert!(config.federation.handle_key.is_none());
    let key = "k".repeat(MIN_KEY_BYTES);
    let config = run(
        &BASE,
        &[("MCP_UPSTREAM_TASKS", "off"), ("MCP_TASK_HANDLE_KEY", &key)],
    )
    .unwrap();
    assert!(!config.federation.upstream_tasks);
    assert_eq!(
        config.federation.handle_key.as_deref(),
        Some(key.as_bytes())
    );
    assert!(!format!("{:?}", config.federation).contains(&key));
    refused(
        &base_and(&["--task-handle-key", "short"]),
        &[],
        "--task-handle-key: the key must be at least 32 bytes",
    );
    refused(
        &base_and(&["--upstream-tasks", "maybe"]),
        &[],
        "--upstream-tasks: \"maybe\" is neither on nor off",
    );
}
