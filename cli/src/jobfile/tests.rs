use super::*;

fn problems(text: &str) -> Vec<String> {
    load(text)
        .err()
        .unwrap_or_else(|| panic!("accepted:\n{text}"))
        .iter()
        .map(ToString::to_string)
        .collect()
}

const CAMEL: &str = "\
elasticjob:
  regCenter:
    serverLists: zk1:2181, zk2:2181
    namespace: demo
    sessionTimeoutMilliseconds: 4000
    connectionTimeoutMilliseconds: 1500
    baseSleepTimeMilliseconds: 200
    maxSleepTimeMilliseconds: 800
    maxRetries: 5
    digest: ops:s3cret
  jobs:
    scriptJob:
      elasticJobType: SCRIPT
      cron: 0/5 * * * * ?
      shardingTotalCount: 3
      shardingItemParameters: 0=a,1=b,2=c
      props:
        script.command.line: echo SCRIPT Job
";

#[test]
fn list_shape_takes_the_type_from_props() {
    let file = load(
        "- jobName: s\n  shardingTotalCount: 2\n  props:\n    script.command.line: echo hi\n\
         - jobName: h\n  shardingTotalCount: 1\n  props:\n    http.uri: http://127.0.0.1:1/\n    http.method: GET\n",
    )
    .unwrap();
    let kinds: Vec<_> = file
        .jobs
        .iter()
        .map(|j| (j.config.job_name.as_str(), j.kind))
        .collect();
    assert_eq!(
        kinds,
        [("s", FileJobKind::Script), ("h", FileJobKind::Http)]
    );
    assert_eq!(file.shape, Shape::List);
    assert_eq!(file.registry, None);
    let err = problems("- jobName: x\n  shardingTotalCount: 1\n");
    assert!(err[0].contains("cannot tell its type"), "{err:?}");
}

#[test]
fn spring_boot_shape_with_every_reg_center_key() {
    let file = load(CAMEL).unwrap();
    let reg = file.registry.clone().unwrap();
    assert_eq!(reg.url.to_string(), "zk://ops:***@zk1:2181,zk2:2181/demo");
    assert_eq!(reg.url.credentials().unwrap().password(), "s3cret");
    assert_eq!(reg.session_timeout, Some(Duration::from_secs(4)));
    assert_eq!(reg.connection_timeout, Some(Duration::from_millis(1500)));
    assert_eq!(reg.base_sleep, Some(Duration::from_millis(200)));
    assert_eq!(reg.max_sleep, Some(Duration::from_millis(800)));
    assert_eq!(reg.max_retries, Some(5));
    assert_eq!(file.jobs.len(), 1);
    let job = &file.jobs[0];
    assert_eq!(job.config.job_name, "scriptJob");
    assert_eq!(job.config.sharding_total_count, 3);
    assert_eq!(job.kind, FileJobKind::Script);
}

#[test]
fn kebab_and_snake_case_read_to_the_same_jobs_and_registry() {
    let kebab = CAMEL
        .replace("regCenter", "reg-center")
        .replace("serverLists", "server-lists")
        .replace("sessionTimeoutMilliseconds", "session-timeout-milliseconds")
        .replace(
            "connectionTimeoutMilliseconds",
            "connection-timeout-milliseconds",
        )
        .replace("baseSleepTimeMilliseconds", "base-sleep-time-milliseconds")
        .replace("maxSleepTimeMilliseconds", "max-sleep-time-milliseconds")
        .replace("maxRetries", "max-retries")
        .replace("elasticJobType", "elastic-job-type")
        .replace("shardingTotalCount", "sharding-total-count")
        .replace("shardingItemParameters", "sharding-item-parameters");
    let snake = kebab
        .replace("reg-center", "reg_center")
        .replace("sharding-total-count", "sharding_total_count");
    assert_ne!(kebab, CAMEL);
    let want = load(CAMEL).unwrap();
    assert_eq!(load(&kebab).unwrap(), want);
    assert_eq!(load(&snake).unwrap(), want);
}

#[test]
fn a_typo_is_refused_with_its_place_and_the_nearest_name() {
    let text = CAMEL.replace("regCenter", "regcenter");
    let err = problems(&text);
    assert_eq!(
        err,
        ["2:3: elasticjob: unknown key `regcenter` (did you mean `regCenter`?)"]
    );
    let text = CAMEL.replace("shardingTotalCount: 3", "shardingTotlCount: 3");
    let err = problems(&text);
    assert!(
        err.iter().any(|e| e.starts_with("15:7: job \"scriptJob\": unknown key `shardingTotlCount` (did you mean `shardingTotalCount`?)")),
        "{err:?}"
    );
    // Not reported as a problem of jobName.
    assert!(err.iter().all(|e| !e.contains("jobName")), "{err:?}");
    let err = problems(
        "- jobName: a\n  shardingTotalCount: 1\n  failovr: true\n  props:\n    script.command.line: x\n",
    );
    assert_eq!(
        err,
        ["3:3: job \"a\": unknown key `failovr` (did you mean `failover`?)"]
    );
    let err = problems(&CAMEL.replace("      cron:", "      job-name: other\n      cron:"));
    assert!(
        err[0].contains("a job's name is its key under elasticjob.jobs"),
        "{err:?}"
    );
    // The same key twice under two spellings.
    let err = problems(&CAMEL.replace("      cron:", "      sharding-total-count: 2\n      cron:"));
    assert!(
        err.iter()
            .any(|e| e.contains("are the same key (shardingTotalCount)")),
        "{err:?}"
    );
}

#[test]
fn props_are_checked_against_the_type_with_their_place() {
    let err = problems(&CAMEL.replace(
        "        script.command.line: echo SCRIPT Job\n",
        "        script.command.line: echo SCRIPT Job\n        script.timeout.miliseconds: 3000\n",
    ));
    assert_eq!(
        err,
        [
            "19:9: job \"scriptJob\": props script.timeout.miliseconds: unknown prop for a SCRIPT job (did you mean `script.timeout.milliseconds`?) (known: script.command.line, script.timeout.milliseconds, script.output.limit.bytes)"
        ]
    );
    let err = problems(&CAMEL.replace("SCRIPT\n", "HTTP\n"));
    assert!(
        err.iter().any(|e| e.contains("is a prop of SCRIPT jobs")),
        "{err:?}"
    );
    assert!(
        err.iter().any(|e| e.contains("http.uri is required")),
        "{err:?}"
    );
    let err = problems(
        "- jobName: h\n  shardingTotalCount: 1\n  props:\n    http.uri: 'http://exa mple/'\n    http.method: GET\n",
    );
    assert!(
        err[0].starts_with("4:5: ") && err[0].contains("is not a URL"),
        "{err:?}"
    );
}

#[test]
fn java_class_jobs_are_skipped_and_the_rest_kept() {
    let text = format!(
        "{CAMEL}    javaJob:\n      elasticJobClass: org.example.MyJob\n      cron: 0 * * * * ?\n      shardingTotalCount: 1\n"
    );
    let file = load(&text).unwrap();
    assert_eq!(file.jobs.len(), 1);
    assert_eq!(file.skipped.len(), 1);
    assert_eq!(file.skipped[0].name, "javaJob");
    let why = file.skipped[0].why.to_string();
    assert!(
        why.starts_with("20:7: ") && why.contains("org.example.MyJob"),
        "{why}"
    );
}

#[test]
fn notifier_error_handlers_are_read_with_their_props_checked() {
    let email = CAMEL.replace(
        "      props:\n",
        "      jobErrorHandlerType: EMAIL\n      props:\n        email.host: 127.0.0.1\n        \
         email.port: 2525\n        email.username: u\n        email.password: p\n        \
         email.useSsl: false\n        email.from: a@example.com\n        \
         email.to: b@example.com,c@example.com\n        shardjob.notify.windowMilliseconds: 5000\n",
    );
    let file = load(&email).unwrap();
    assert_eq!(
        file.jobs[0].config.job_error_handler_type,
        shardjob_core::config::ErrorHandlerType::Email
    );
    let err = problems(&CAMEL.replace(
        "      props:\n",
        "      jobErrorHandlerType: DINGTALK\n      props:\n        dingtalk.secret: s\n        \
         dingtalk.connectTimeoutMilliseconds: soon\n",
    ));
    assert!(
        err.iter().any(|e| e.contains(
            "jobErrorHandlerType DINGTALK: props dingtalk.webhook: is required by the DINGTALK \
             error handler"
        )),
        "{err:?}"
    );
    assert!(
        err.iter()
            .any(|e| e.starts_with("20:") && e.contains("\"soon\" is not a positive integer")),
        "{err:?}"
    );
    let err = problems(&CAMEL.replace(
        "      props:\n",
        "      props:\n        wechat.webhook: http://127.0.0.1:1/\n",
    ));
    assert!(
        err[0].contains("configures the WECHAT error handler, but jobErrorHandlerType is LOG"),
        "{err:?}"
    );
}

#[test]
fn what_cannot_be_honoured_is_refused_by_name() {
    let err = problems(&format!("{CAMEL}  tracing:\n    type: RDB\n"));
    assert!(
        err[0].starts_with(
            "19:3: elasticjob.tracing: type RDB needs a database: spring.datasource.url"
        ),
        "{err:?}"
    );
    let err = problems(&CAMEL.replace(
        "      cron:",
        "      jobErrorHandlerType: WEBHOOK\n      cron:",
    ));
    assert!(err[0].contains("WEBHOOK is not built in yet"), "{err:?}");
    let err = problems(&CAMEL.replace("      cron:", "      jobListenerTypes: [LOG]\n      cron:"));
    assert!(err[0].contains("provides no listener types"), "{err:?}");
    // Honoured on ZooKeeper (the file's registry) and the in-memory one, refused on etcd: a
    // warning says so.
    let file =
        load(&CAMEL.replace("      cron:", "      maxTimeDiffSeconds: 5\n      cron:")).unwrap();
    assert!(
        file.warnings.iter().any(|w| w
            .to_string()
            .contains("on etcd, maxTimeDiffSeconds 5: this registry keeps no clock")),
        "{:?}",
        file.warnings
    );
    let err = problems(&CAMEL.replace("digest: ops:s3cret", "digest: nocolon"));
    assert!(err[0].contains("expected user:password"), "{err:?}");
    let err = problems(&CAMEL.replace("namespace: demo", "namespace: zookeeper"));
    assert!(err[0].contains("ZooKeeper's own node"), "{err:?}");
}

#[test]
fn names_the_registries_refuse_are_refused() {
    for name in ["a\u{200B}b", "pay\u{202E}fdp", "p\u{E000}"] {
        let err = problems(&CAMEL.replace("scriptJob:", &format!("\"{name}\":")));
        assert!(
            err.iter().any(|e| e.contains("jobName: must not contain")),
            "{name:?}: {err:?}"
        );
    }
}

#[test]
fn the_examples_pass() {
    for text in [
        include_str!("../../../examples/jobs.yaml"),
        include_str!("../../../examples/script_jobs.yaml"),
        include_str!("../../../examples/application.yml"),
    ] {
        if let Err(e) = load(text) {
            panic!("{e:?}");
        }
    }
}

#[test]
fn shardjobs_own_props_are_known_to_every_job_type() {
    let with = |prop: &str| {
        CAMEL.replace(
            "        script.command.line: echo SCRIPT Job\n",
            &format!("        script.command.line: echo SCRIPT Job\n        {prop}: 600\n"),
        )
    };
    let file = load(&with("shardjob.misfire.catchup.seconds")).unwrap();
    assert_eq!(file.jobs[0].config.misfire_catchup_ms(), 600_000);
    let err = problems(&with("shardjob.misfire.catchup.second"));
    assert!(
        err.iter()
            .any(|e| e.contains("did you mean `shardjob.misfire.catchup.seconds`")),
        "{err:?}"
    );
}

#[test]
fn the_elasticjob_compat_prop_is_known_and_checked() {
    let with = |value: &str| {
        CAMEL.replace(
            "        script.command.line: echo SCRIPT Job\n",
            &format!(
                "        script.command.line: echo SCRIPT Job\n        \
                 shardjob.elasticjob.compat: {value}\n"
            ),
        )
    };
    let file = load(&with("\"3.0.5\"")).unwrap();
    assert_eq!(
        file.jobs[0].config.elasticjob_compat(),
        shardjob_core::config::ElasticJobCompat::V3_0_5
    );
    let err = problems(&with("\"3.1\""));
    assert!(
        err.iter()
            .any(|e| e.contains("shardjob.elasticjob.compat") && e.contains("3.0.4")),
        "{err:?}"
    );
}

#[test]
fn the_dump_port_binds_loopback_unless_told_otherwise() {
    let file = load(&format!("{CAMEL}  dump:\n    port: 9888\n")).unwrap();
    assert_eq!(file.dump, Some("127.0.0.1:9888".parse().unwrap()));
    let file = load(&format!(
        "{CAMEL}  dump:\n    port: '0'\n    address: 0.0.0.0\n    enabled: true\n"
    ))
    .unwrap();
    assert_eq!(file.dump, Some("0.0.0.0:0".parse().unwrap()));
    // ElasticJob's starter: off when `enabled` is false, whatever the port.
    let file = load(&format!(
        "{CAMEL}  dump:\n    port: 9888\n    enabled: false\n"
    ))
    .unwrap();
    assert_eq!(file.dump, None);
    assert_eq!(load(CAMEL).unwrap().dump, None);
}

#[test]
fn the_metrics_endpoint_is_read_as_the_dump_port_is() {
    let file = load(&format!("{CAMEL}  metrics:\n    port: 9464\n")).unwrap();
    assert_eq!(file.metrics, Some("127.0.0.1:9464".parse().unwrap()));
    assert_eq!(file.dump, None);
    let file = load(&format!(
        "{CAMEL}  metrics:\n    port: 0\n    address: 0.0.0.0\n"
    ))
    .unwrap();
    assert_eq!(file.metrics, Some("0.0.0.0:0".parse().unwrap()));
    let file = load(&format!(
        "{CAMEL}  metrics:\n    port: 9464\n    enabled: false\n"
    ))
    .unwrap();
    assert_eq!(file.metrics, None);
    assert_eq!(load(CAMEL).unwrap().metrics, None);
    let err = problems(&format!("{CAMEL}  metrics:\n    port: 70000\n"));
    assert!(
        err[0].starts_with("20:5: elasticjob.metrics.port: ")
            && err[0].contains("\"70000\" is not a TCP port"),
        "{err:?}"
    );
    let err = problems(&format!("{CAMEL}  metrics:\n    enabled: true\n"));
    assert!(
        err[0].contains("elasticjob.metrics: no port: add elasticjob.metrics.port (say 9464)"),
        "{err:?}"
    );
    let err = problems(&format!("{CAMEL}  metrics: 9464\n"));
    assert!(
        err[0].contains("elasticjob.metrics: expected a mapping"),
        "{err:?}"
    );
}

#[test]
fn a_bad_dump_port_is_refused_with_its_place() {
    for (port, shown) in [("65536", "\"65536\""), ("-1", "\"-1\""), ("abc", "\"abc\"")] {
        let err = problems(&format!("{CAMEL}  dump:\n    port: {port}\n"));
        assert_eq!(err.len(), 1, "{err:?}");
        assert!(
            err[0].starts_with("20:5: elasticjob.dump.port: ")
                && err[0].contains(&format!("{shown} is not a TCP port"))
                && err[0].contains("0 to 65535"),
            "{err:?}"
        );
    }
    let err = problems(&format!("{CAMEL}  dump:\n    enabled: true\n"));
    assert!(err[0].contains("elasticjob.dump: no port"), "{err:?}");
    let err = problems(&format!(
        "{CAMEL}  dump:\n    port: 9888\n    address: here\n"
    ));
    assert!(err[0].contains("\"here\" is not an IP address"), "{err:?}");
    let err = problems(&format!("{CAMEL}  dump:\n    prot: 9888\n"));
    assert!(err[0].contains("unknown key `prot`"), "{err:?}");
}

#[test]
fn tracing_takes_elasticjobs_spring_boot_keys() {
    let text = format!(
        "spring:\n  datasource:\n    url: jdbc:mysql://db:3306/jobs?useSSL=false\n    \
         username: ej\n    password: pw\n    driver-class-name: com.mysql.cj.jdbc.Driver\n\
         {CAMEL}  tracing:\n    type: RDB\n    excludeJobNames: [noisy]\n\
         tracing:\n  retention: 7d\n  queue-bound: 500\n"
    );
    let file = load(&text).unwrap();
    let t = file.tracing.expect("tracing read");
    assert_eq!(
        t.source,
        tracing::TracingSource::Jdbc {
            url: "jdbc:mysql://db:3306/jobs?useSSL=false".into(),
            username: Some("ej".into()),
            password: Some("pw".into()),
        }
    );
    assert_eq!(t.retention, Some(Duration::from_secs(7 * 86_400)));
    assert_eq!(t.queue_bound, Some(500));
    assert_eq!(t.exclude_jobs, ["noisy".to_owned()].into());
    assert!(!format!("{t:?}").contains("pw"));
    // The driver class is Java's: said, not silently dropped.
    assert!(
        file.warnings
            .iter()
            .any(|w| w.message.contains("driver-class-name is not read")),
        "{:?}",
        file.warnings
    );
    #[cfg(feature = "history")]
    {
        let config = t.config().unwrap();
        assert_eq!(
            config.url.driver_url(),
            "mysql://db:3306/jobs?ssl-mode=disabled"
        );
        assert_eq!(config.options.queue_bound, 500);
        assert!(!config.jobs.traces("noisy") && config.jobs.traces("settle"));
    }
}

#[test]
fn tracing_takes_shardjobs_own_url() {
    let text = format!("{CAMEL}tracing:\n  url: sqlite://history.db\n  retention: 12h\n");
    let t = load(&text).unwrap().tracing.expect("tracing read");
    assert_eq!(
        t.source,
        tracing::TracingSource::Url("sqlite://history.db".into())
    );
    assert_eq!(t.retention, Some(Duration::from_secs(12 * 3600)));
}

#[test]
fn tracing_refuses_what_it_cannot_honour() {
    let oracle = format!(
        "spring:\n  datasource:\n    url: jdbc:oracle:thin:@db:1521:orcl\n{CAMEL}  tracing:\n    type: RDB\n"
    );
    let err = problems(&oracle);
    assert!(
        err.iter()
            .any(|e| e.contains("elasticjob.tracing") || e.contains("job history")),
        "{err:?}"
    );
    assert!(err.iter().any(|e| e.contains("oracle")), "{err:?}");
    let both = format!(
        "spring:\n  datasource:\n    url: jdbc:sqlite:a.db\n{CAMEL}  tracing:\n    type: RDB\n\
         tracing:\n  url: sqlite://b.db\n"
    );
    assert!(problems(&both).iter().any(|e| e.contains("keep one")));
    let log = format!("{CAMEL}  tracing:\n    type: LOG\n");
    assert!(
        problems(&log)
            .iter()
            .any(|e| e.contains("\"LOG\" is not supported"))
    );
    let retention = format!("{CAMEL}tracing:\n  url: sqlite://x.db\n  retention: 7y\n");
    let err = problems(&retention);
    assert!(err.iter().any(|e| e.contains("unknown unit")), "{err:?}");
    let no_database = format!("{CAMEL}tracing:\n  retention: 7d\n");
    let err = problems(&no_database);
    assert!(
        err.iter().any(|e| e.contains("no history database")),
        "{err:?}"
    );
    let exclusive = format!(
        "{CAMEL}  tracing:\n    type: RDB\n    includeJobNames: a\n    excludeJobNames: b\n\
         tracing:\n  url: sqlite://x.db\n"
    );
    assert!(
        problems(&exclusive)
            .iter()
            .any(|e| e.contains("mutually exclusive"))
    );
}

/// A build without a kind's feature refuses a job of that kind by name, never skips it (run
/// with `--no-default-features --features mem`).
#[cfg(not(all(feature = "script", feature = "http")))]
#[test]
fn a_kind_this_build_lacks_is_refused_not_skipped() {
    let list = "- jobName: s\n  shardingTotalCount: 1\n  props:\n    script.command.line: echo hi\n\
                - jobName: h\n  shardingTotalCount: 1\n  props:\n    http.uri: http://127.0.0.1:1/\n    http.method: GET\n";
    let spring = "elasticjob:\n  jobs:\n    s:\n      elasticJobType: SCRIPT\n      \
                  shardingTotalCount: 1\n      props:\n        script.command.line: echo hi\n    \
                  h:\n      elasticJobType: HTTP\n      shardingTotalCount: 1\n      props:\n        \
                  http.uri: http://127.0.0.1:1/\n        http.method: GET\n";
    for text in [list, spring] {
        let problems = problems(text);
        for (kind, feature, built) in [
            ("SCRIPT", "script", cfg!(feature = "script")),
            ("HTTP", "http", cfg!(feature = "http")),
        ] {
            let said = format!(
                "a {kind} job, and this shardjob was built without its `{feature}` feature"
            );
            assert_eq!(
                problems.iter().any(|p| p.contains(&said)),
                !built,
                "{problems:?}"
            );
        }
    }
}
