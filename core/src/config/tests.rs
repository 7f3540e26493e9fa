use super::*;

/// The example of ElasticJob's `JobConfigurationPOJOTest`, as ElasticJob writes it.
const ELASTICJOB_EXAMPLE: &str = "\
cron: 0/1 * * * * ?
description: Job description
disabled: false
failover: false
jobErrorHandlerType: IGNORE
jobExecutorThreadPoolSizeProviderType: CPU
jobName: test_job
jobParameter: param
jobShardingStrategyType: AVG_ALLOCATION
maxTimeDiffSeconds: -1
misfire: false
monitorExecution: false
overwrite: false
props:
  key: value
reconcileIntervalMinutes: 0
shardingItemParameters: 0=A,1=B,2=C
shardingTotalCount: 3
staticSharding: false
";

fn problems(yaml: &str) -> Vec<ConfigProblem> {
    match JobConfig::from_yaml(yaml, Strictness::Strict) {
        Ok(c) => panic!("expected problems, got {c:?}"),
        Err(e) => e.problems().to_vec(),
    }
}

fn keys(yaml: &str) -> Vec<&'static str> {
    problems(yaml).iter().map(|p| p.key).collect()
}

#[test]
fn reads_elasticjobs_own_yaml() {
    let c = JobConfig::from_yaml(ELASTICJOB_EXAMPLE, Strictness::Strict).unwrap();
    assert_eq!(c.job_name, "test_job");
    assert_eq!(c.cron.as_ref().map(CronExpr::as_str), Some("0/1 * * * * ?"));
    assert_eq!(c.sharding_total_count, 3);
    assert_eq!(c.item_parameter(1), Some("B"));
    assert_eq!(c.job_parameter, "param");
    assert!(!c.monitor_execution && !c.misfire && !c.failover);
    assert_eq!(c.reconcile_interval_minutes, 0);
    assert_eq!(c.job_error_handler_type, ErrorHandlerType::Ignore);
    assert_eq!(c.props.get("key").map(String::as_str), Some("value"));
}

#[test]
fn missing_keys_take_the_one_default_set() {
    let c =
        JobConfig::from_yaml("jobName: j\nshardingTotalCount: 2\n", Strictness::Strict).unwrap();
    assert_eq!(c, JobConfig::new("j", 2));
    assert!(
        c.monitor_execution,
        "ElasticJob's POJO would say false here"
    );
    assert!(c.misfire);
    assert!(!c.failover);
    assert_eq!(c.reconcile_interval_minutes, 10);
    assert_eq!(c.max_time_diff_seconds, -1);
    assert_eq!(c.job_sharding_strategy_type, "AVG_ALLOCATION");
    assert_eq!(c.time_zone, JobTimeZone::utc());
    assert!(c.cron.is_none());
}

#[test]
fn writes_every_key_and_reads_it_back() {
    let mut c = JobConfig::from_yaml(ELASTICJOB_EXAMPLE, Strictness::Strict).unwrap();
    c.label = Some("blue".into());
    c.time_zone = JobTimeZone::parse("Asia/Shanghai").unwrap();
    let yaml = c.to_yaml();
    let executor_keys = [compat::EXECUTOR_KEY_3_0_4, compat::EXECUTOR_KEY_3_0_5];
    for key in KEYS.iter().filter(|k| !executor_keys.contains(k)) {
        assert!(
            yaml.contains(&format!("{key}:")),
            "{key} missing in\n{yaml}"
        );
    }
    for key in executor_keys {
        assert!(
            !yaml.contains(key),
            "the default executor type is left out:\n{yaml}"
        );
    }
    let keys_in_order: Vec<&str> = yaml
        .lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split(':').next())
        .collect();
    let mut sorted = keys_in_order.clone();
    sorted.sort();
    assert_eq!(
        keys_in_order, sorted,
        "ElasticJob writes keys in alphabetical order"
    );
    assert_eq!(JobConfig::from_yaml(&yaml, Strictness::Strict).unwrap(), c);
    // Defaults are written out, not left to the reader.
    let yaml = JobConfig::new("j", 1).to_yaml();
    assert!(yaml.contains("monitorExecution: true"));
    assert!(yaml.contains("misfire: true"));
    assert!(yaml.contains("reconcileIntervalMinutes: 10"));
    assert!(
        !yaml.contains("cron:"),
        "a job without a schedule has no cron key"
    );
}

#[test]
fn keeps_tagged_extra_configurations() {
    let yaml = "jobName: j\nshardingTotalCount: 1\njobExtraConfigurations:\n- !!org.apache.shardingsphere.elasticjob.tracing.yaml.YamlTracingConfiguration\n  type: RDB\n";
    let c = JobConfig::from_yaml(yaml, Strictness::Strict).unwrap();
    assert_eq!(c.job_extra_configurations.len(), 1);
    let again = JobConfig::from_yaml(&c.to_yaml(), Strictness::Strict).unwrap();
    assert_eq!(again.job_extra_configurations, c.job_extra_configurations);
}

#[test]
fn job_name_problems_are_named() {
    for (name, key) in [
        ("''", "jobName"),
        ("'a/b'", "jobName"),
        ("'a b'", "jobName"),
        ("'a@-@b'", "jobName"),
        ("'..'", "jobName"),
    ] {
        assert_eq!(
            keys(&format!("jobName: {name}\nshardingTotalCount: 1\n")),
            [key],
            "{name}"
        );
    }
    assert_eq!(keys("shardingTotalCount: 1\n"), ["jobName"]);
    assert_eq!(
        problems("shardingTotalCount: 1\n")[0].problem,
        Problem::Missing
    );
}

#[test]
fn total_count_must_be_positive_and_bounded() {
    assert_eq!(
        problems("jobName: j\nshardingTotalCount: 0\n")[0].problem,
        Problem::NotPositive(0)
    );
    assert_eq!(
        problems("jobName: j\nshardingTotalCount: -3\n")[0].problem,
        Problem::NotPositive(-3)
    );
    assert_eq!(problems("jobName: j\n")[0].problem, Problem::Missing);
    assert!(matches!(
        problems("jobName: j\nshardingTotalCount: 100001\n")[0].problem,
        Problem::TooLarge(..)
    ));
    assert!(matches!(
        problems("jobName: j\nshardingTotalCount: three\n")[0].problem,
        Problem::WrongType { .. }
    ));
}

#[test]
fn item_parameters_follow_elasticjob_and_are_checked() {
    let ok = parse_item_parameters(" 0 = a , 1=b,").unwrap();
    assert_eq!(ok.get(&0).map(String::as_str), Some("a"));
    assert_eq!(ok.get(&1).map(String::as_str), Some("b"));
    assert!(parse_item_parameters("").unwrap().is_empty());
    assert!(matches!(
        parse_item_parameters("0=a=b"),
        Err(Problem::BadItemParameter { .. })
    ));
    assert!(matches!(
        parse_item_parameters("0"),
        Err(Problem::BadItemParameter { .. })
    ));
    assert!(matches!(
        parse_item_parameters("x=a"),
        Err(Problem::BadItemParameter { .. })
    ));
    assert!(matches!(
        parse_item_parameters("-1=a"),
        Err(Problem::BadItemParameter { .. })
    ));
    assert!(matches!(
        parse_item_parameters("0=a,,1=b"),
        Err(Problem::BadItemParameter { .. })
    ));
    assert!(matches!(
        parse_item_parameters("0="),
        Err(Problem::BadItemParameter { .. })
    ));
    assert_eq!(
        parse_item_parameters("0=a,0=b"),
        Err(Problem::DuplicateItem(0))
    );
    let p = problems("jobName: j\nshardingTotalCount: 2\nshardingItemParameters: 0=a,2=c\n");
    assert_eq!(p[0].problem, Problem::ItemOutOfRange { item: 2, total: 2 });
    assert_eq!(p[0].key, "shardingItemParameters");
}

#[test]
fn cron_time_zone_and_types_are_checked() {
    let base = "jobName: j\nshardingTotalCount: 1\n";
    assert_eq!(keys(&format!("{base}cron: '0 0 12 * * *'\n")), ["cron"]);
    assert_eq!(keys(&format!("{base}cron: '* * * * *'\n")), ["cron"]);
    assert_eq!(
        keys(&format!("{base}timeZone: Mars/Olympus\n")),
        ["timeZone"]
    );
    assert_eq!(
        keys(&format!("{base}jobShardingStrategyType: RANDOM\n")),
        ["jobShardingStrategyType"]
    );
    assert_eq!(
        keys(&format!(
            "{base}jobExecutorThreadPoolSizeProviderType: GPU\n"
        )),
        ["jobExecutorThreadPoolSizeProviderType"]
    );
    assert_eq!(
        keys(&format!("{base}jobErrorHandlerType: SCREAM\n")),
        ["jobErrorHandlerType"]
    );
    let msg = problems(&format!("{base}jobErrorHandlerType: SCREAM\n"))[0].to_string();
    assert!(msg.contains("LOG") && msg.contains("SCREAM"), "{msg}");
    // GMT offsets as ElasticJob writes them, and IANA names.
    for tz in ["GMT+08:00", "Asia/Shanghai", "UTC"] {
        JobConfig::from_yaml(&format!("{base}timeZone: {tz}\n"), Strictness::Strict).unwrap();
    }
    // Custom strategies are accepted once registered.
    let custom = format!("{base}jobShardingStrategyType: MINE\n");
    let known = KnownTypes {
        strategies: ["MINE".to_owned()].into(),
    };
    JobConfig::from_yaml_with(&custom, Strictness::Strict, &known).unwrap();
}

#[test]
fn nonsensical_numbers_are_rejected() {
    let base = "jobName: j\nshardingTotalCount: 1\n";
    assert_eq!(
        keys(&format!("{base}maxTimeDiffSeconds: 0\n")),
        ["maxTimeDiffSeconds"]
    );
    assert_eq!(
        keys(&format!("{base}maxTimeDiffSeconds: -7\n")),
        ["maxTimeDiffSeconds"]
    );
    assert_eq!(
        keys(&format!("{base}reconcileIntervalMinutes: -1\n")),
        ["reconcileIntervalMinutes"]
    );
    assert_eq!(
        keys(&format!("{base}monitorExecution: maybe\n")),
        ["monitorExecution"]
    );
    assert_eq!(
        keys(&format!("{base}monitorExecution: false\nfailover: true\n")),
        ["failover"],
        "failover cannot work without running markers"
    );
}

#[test]
fn every_problem_is_reported_not_just_the_first() {
    let yaml = "jobName: 'a b'\nshardingTotalCount: 0\ncron: nope\ntimeZone: Nowhere\nshardingTotlCount: 3\n";
    let keys = keys(yaml);
    for key in ["jobName", "shardingTotalCount", "cron", "timeZone"] {
        assert!(keys.contains(&key), "{key} not in {keys:?}");
    }
    let all = problems(yaml);
    assert!(all.iter().any(|p| p.key.is_empty()
        && p.problem
            == Problem::UnknownKey {
                key: "shardingTotlCount".into(),
                suggestion: Some("shardingTotalCount"),
            }));
    assert!(
        all.iter().any(|p| p.to_string()
            == "job \"a b\": unknown key \"shardingTotlCount\" (did you mean `shardingTotalCount`?)"),
        "{all:?}"
    );
    // Lenient mode ignores unknown keys only.
    let lenient = JobConfig::from_yaml(
        "jobName: j\nshardingTotalCount: 1\nfuture: x\n",
        Strictness::Lenient,
    );
    assert!(lenient.is_ok());
}

#[test]
fn malformed_yaml_is_a_clear_error() {
    for bad in ["jobName: [unclosed", "- a\nb: c", "just text", "", "~"] {
        let err = JobConfig::from_yaml(bad, Strictness::Strict).unwrap_err();
        assert!(!err.to_string().is_empty());
    }
    let err = JobConfig::from_yaml("jobName: [unclosed", Strictness::Strict).unwrap_err();
    assert!(matches!(err, JobConfigError::Yaml(_)), "{err}");
    assert!(err.to_string().contains("line"), "{err}");
}

#[test]
fn a_file_of_jobs() {
    let yaml = "- jobName: a\n  shardingTotalCount: 2\n  cron: 0/5 * * * * ?\n- jobName: b\n  shardingTotalCount: 1\n";
    let jobs = parse_jobs_file(yaml, Strictness::Strict, &KnownTypes::default()).unwrap();
    assert_eq!(
        jobs.iter().map(|j| j.job_name.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    let one = parse_jobs_file(
        "jobName: a\nshardingTotalCount: 2\n",
        Strictness::Strict,
        &KnownTypes::default(),
    );
    assert_eq!(one.unwrap().len(), 1);
    let dup = "- jobName: a\n  shardingTotalCount: 1\n- jobName: a\n  shardingTotalCount: 1\n";
    let err = parse_jobs_file(dup, Strictness::Strict, &KnownTypes::default()).unwrap_err();
    assert_eq!(err.problems()[0].problem, Problem::DuplicateJob);
    // Problems of several jobs are all reported, each under its job.
    let bad = "- jobName: a\n  shardingTotalCount: 0\n- shardingTotalCount: 1\n- 5\n";
    let err = parse_jobs_file(bad, Strictness::Strict, &KnownTypes::default()).unwrap_err();
    let jobs: Vec<&str> = err.problems().iter().map(|p| p.job.as_str()).collect();
    assert_eq!(jobs, ["a", "#2", "#3"]);
    assert!(parse_jobs_file("[]", Strictness::Strict, &KnownTypes::default()).is_err());
}

/// The top-level keys of a YAML mapping.
fn top_keys(yaml: &str) -> Vec<String> {
    match serde_yaml_ng::from_str::<Value>(yaml) {
        Ok(Value::Mapping(m)) => m
            .keys()
            .filter_map(|k| k.as_str().map(str::to_owned))
            .collect(),
        other => panic!("not a mapping: {other:?}"),
    }
}

/// A configuration with every key set away from its default (and `label`, `cron`, listeners,
/// extras and props present), so that every key is written.
fn everything_set() -> JobConfig {
    let mut c = JobConfig::from_yaml(ELASTICJOB_EXAMPLE, Strictness::Strict).unwrap();
    c.label = Some("blue".into());
    c.time_zone = JobTimeZone::parse("GMT+08:00").unwrap();
    c.job_executor_thread_pool_size_provider_type = ExecutorType::SingleThread;
    c.job_listener_types = vec!["audit".into()];
    c.job_extra_configurations = vec![Value::String("x".into())];
    c.disabled = true;
    c.overwrite = true;
    c.static_sharding = true;
    c.failover = true;
    c.monitor_execution = true;
    c
}

#[test]
fn a_written_config_has_only_keys_elasticjob_3_0_4_knows() {
    let configs = [
        JobConfig::new("j", 1),
        everything_set(),
        JobConfig::from_yaml(ELASTICJOB_EXAMPLE, Strictness::Strict).unwrap(),
    ];
    for c in configs {
        assert_eq!(c.elasticjob_compat(), ElasticJobCompat::V3_0_4);
        let yaml = c.to_yaml();
        for key in top_keys(&yaml) {
            assert!(
                compat::POJO_KEYS_3_0_4.contains(&key.as_str()),
                "3.0.4's JobConfigurationPOJO has no property {key:?}:\n{yaml}"
            );
        }
    }
    // Set to 3.0.5, the same holds for 3.0.5's POJO.
    let c = everything_set().with_elasticjob_compat(ElasticJobCompat::V3_0_5);
    for key in top_keys(&c.to_yaml()) {
        assert!(compat::POJO_KEYS_3_0_5.contains(&key.as_str()), "{key}");
    }
}

#[test]
fn the_executor_key_is_left_out_when_default_and_follows_the_compat_setting() {
    let default = JobConfig::new("j", 1).to_yaml();
    assert!(!default.contains("jobExecutor"), "{default}");

    let mut c = JobConfig::new("j", 1);
    c.job_executor_thread_pool_size_provider_type = ExecutorType::SingleThread;
    let v304 = c.to_yaml();
    assert!(
        v304.contains("jobExecutorServiceHandlerType: SINGLE_THREAD\n"),
        "{v304}"
    );
    assert!(!v304.contains(compat::EXECUTOR_KEY_3_0_5), "{v304}");
    assert_eq!(JobConfig::from_yaml(&v304, Strictness::Strict).unwrap(), c);

    let c = c.with_elasticjob_compat(ElasticJobCompat::V3_0_5);
    let v305 = c.to_yaml();
    assert!(
        v305.contains("jobExecutorThreadPoolSizeProviderType: SINGLE_THREAD\n"),
        "{v305}"
    );
    assert!(!v305.contains(compat::EXECUTOR_KEY_3_0_4), "{v305}");
    assert!(v305.contains("shardjob.elasticjob.compat: 3.0.5"), "{v305}");
    assert_eq!(JobConfig::from_yaml(&v305, Strictness::Strict).unwrap(), c);
}

#[test]
fn both_executor_keys_are_read() {
    let base = "jobName: j\nshardingTotalCount: 1\n";
    // As ElasticJob 3.0.0-alpha to 3.0.4 write it: read, and written back the same way.
    let old = format!("{base}jobExecutorServiceHandlerType: SINGLE_THREAD\n");
    let c = JobConfig::from_yaml(&old, Strictness::Strict).unwrap();
    assert_eq!(
        c.job_executor_thread_pool_size_provider_type,
        ExecutorType::SingleThread
    );
    assert_eq!(c.elasticjob_compat(), ElasticJobCompat::V3_0_4);
    assert!(
        c.to_yaml()
            .contains("jobExecutorServiceHandlerType: SINGLE_THREAD")
    );

    // As 3.0.5 writes it: read, and written with the key of the version the job is kept
    // readable by, 3.0.4 unless the prop says 3.0.5 (the key a file used does not decide).
    let new = format!("{base}jobExecutorThreadPoolSizeProviderType: SINGLE_THREAD\n");
    let c = JobConfig::from_yaml(&new, Strictness::Strict).unwrap();
    assert_eq!(
        c.job_executor_thread_pool_size_provider_type,
        ExecutorType::SingleThread
    );
    assert_eq!(c.elasticjob_compat(), ElasticJobCompat::V3_0_4);
    assert!(
        c.to_yaml()
            .contains("jobExecutorServiceHandlerType: SINGLE_THREAD")
    );
    let pinned = format!("{new}props:\n  shardjob.elasticjob.compat: 3.0.5\n");
    let c = JobConfig::from_yaml(&pinned, Strictness::Strict).unwrap();
    assert_eq!(c.elasticjob_compat(), ElasticJobCompat::V3_0_5);
    assert!(
        c.to_yaml()
            .contains("jobExecutorThreadPoolSizeProviderType: SINGLE_THREAD")
    );

    // The default type is not written at all, whichever key it was read from.
    let c = JobConfig::from_yaml(
        &format!("{base}jobExecutorThreadPoolSizeProviderType: CPU\n"),
        Strictness::Strict,
    )
    .unwrap();
    assert_eq!(c, JobConfig::new("j", 1));

    // Both keys: the same type is fine, different types are a problem naming both.
    let same = format!("{old}jobExecutorThreadPoolSizeProviderType: SINGLE_THREAD\n");
    let c = JobConfig::from_yaml(&same, Strictness::Strict).unwrap();
    assert_eq!(
        c.job_executor_thread_pool_size_provider_type,
        ExecutorType::SingleThread
    );
    let differ = format!("{old}jobExecutorThreadPoolSizeProviderType: CPU\n");
    let p = problems(&differ);
    assert_eq!(p.len(), 1, "{p:?}");
    let msg = p[0].to_string();
    assert!(
        msg.contains("jobExecutorThreadPoolSizeProviderType")
            && msg.contains("jobExecutorServiceHandlerType")
            && msg.contains("SINGLE_THREAD"),
        "{msg}"
    );
}

#[test]
fn the_compat_setting_is_checked() {
    let mut c = JobConfig::new("j", 1);
    c.props.insert(COMPAT_PROP.to_owned(), "3.1".to_owned());
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains(COMPAT_PROP) && err.contains("3.0.5"), "{err}");
    assert_eq!(c.elasticjob_compat(), ElasticJobCompat::V3_0_4);
}

#[test]
fn utc_is_written_as_gmt_which_elasticjob_accepts() {
    let c = JobConfig::new("j", 1);
    let yaml = c.to_yaml();
    assert!(yaml.contains("timeZone: GMT\n"), "{yaml}");
    assert_eq!(JobConfig::from_yaml(&yaml, Strictness::Strict).unwrap(), c);
    assert!(c.elasticjob_unrunnable().is_empty());
    // Offsets are written as ElasticJob writes them.
    let mut c = JobConfig::new("j", 1);
    c.time_zone = JobTimeZone::parse("GMT+8").unwrap();
    assert!(c.to_yaml().contains("timeZone: GMT+08:00\n"));
    assert!(c.elasticjob_unrunnable().is_empty());
    // An IANA zone is shardjob's: written as it is, and said to be unrunnable by ElasticJob.
    c.time_zone = JobTimeZone::parse("Asia/Shanghai").unwrap();
    assert!(c.to_yaml().contains("timeZone: Asia/Shanghai\n"));
    let why = c.elasticjob_unrunnable();
    assert_eq!(
        why.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        ["timeZone"]
    );
    c.job_error_handler_type = ErrorHandlerType::Webhook;
    c.job_sharding_strategy_type = "MINE".into();
    assert_eq!(c.elasticjob_unrunnable().len(), 3);
}

#[test]
fn names_the_registries_refuse_or_that_hide_text_are_refused() {
    for bad in [
        "a\u{200B}b",
        "pay\u{202E}fdp",
        "a\u{2066}b",
        "x\u{FEFF}",
        "p\u{E000}",
        "e\u{1F600}",
        "\u{FFF5}",
        "a\u{7F}",
        "a\u{85}b",
        "..",
    ] {
        assert!(
            matches!(check_job_name(bad), Err(Problem::BadJobName(_))),
            "{bad:?}: {:?}",
            check_job_name(bad)
        );
    }
    let why = check_job_name("a\u{202E}b").unwrap_err().to_string();
    assert!(
        why.contains("U+202E") && why.contains("bidirectional"),
        "{why}"
    );
    for good in ["settle-payments", "报表", "job.v2", "a_b"] {
        assert_eq!(check_job_name(good), Ok(()), "{good}");
    }
}

#[test]
fn namespaces_are_checked_by_segment_and_zookeeper_is_refused() {
    for good in ["ns", "/a/b/", "elasticjob-demo", "团队"] {
        assert_eq!(check_namespace(good), Ok(()), "{good}");
    }
    for bad in [
        "",
        "/",
        "zookeeper",
        "/zookeeper/quota",
        "a//b",
        "a/../b",
        "a\u{200B}",
        "x\u{E001}",
    ] {
        assert!(check_namespace(bad).is_err(), "{bad:?}");
    }
    let why = check_namespace("zookeeper").unwrap_err().to_string();
    assert!(why.contains("ZooKeeper's own node"), "{why}");
    assert_eq!(check_namespace("zookeeper-jobs"), Ok(()));
}

#[test]
fn an_empty_config_node_is_said_to_be_empty() {
    for text in ["", "  \n", "~"] {
        let err = JobConfig::from_yaml(text, Strictness::Lenient).unwrap_err();
        assert_eq!(err, JobConfigError::Empty, "{text:?}");
        assert!(
            err.to_string().contains("the config node is empty"),
            "{err}"
        );
        assert!(!err.to_string().contains("jobName"), "{err}");
    }
}

#[test]
fn nearest_names() {
    assert_eq!(
        nearest_name("shardingTotlCount", KEYS),
        Some("shardingTotalCount")
    );
    assert_eq!(
        nearest_name("sharding-total-count", KEYS),
        Some("shardingTotalCount")
    );
    assert_eq!(nearest_name("somethingElse", &["cron"]), None);
}

#[test]
fn the_catch_up_prop_is_read_and_checked() {
    let mut c = JobConfig::new("nightly", 1);
    assert_eq!(c.misfire_catchup_ms(), 0);
    assert!(c.validate().is_ok());
    c.props
        .insert(MISFIRE_CATCHUP_PROP.to_owned(), " 3600 ".to_owned());
    assert_eq!(c.misfire_catchup_ms(), 3_600_000);
    assert!(c.validate().is_ok());
    for bad in ["-1", "1.5", "an hour", "", "99999999999"] {
        c.props
            .insert(MISFIRE_CATCHUP_PROP.to_owned(), bad.to_owned());
        assert_eq!(c.misfire_catchup_ms(), 0, "{bad}");
        let message = c.validate().unwrap_err().to_string();
        assert!(message.contains(MISFIRE_CATCHUP_PROP), "{bad}: {message}");
    }
}
