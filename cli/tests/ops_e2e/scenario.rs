//! The scenarios, written once over any registry: each step is an operating command run as a
//! process, and each is checked from what the instances really ran (the run log) and from the
//! registry (`shardjob status --json`, `shardjob dump`), waiting for events, never for a fixed
//! time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::fleet::{
    Fleet, INSTANCES, ITEMS, JOB, Run, SIDE, STEADY, WAIT, complete_fires, next_fire, now_ms,
    started_twice,
};

/// The names of the instances.
fn names() -> Vec<&'static str> {
    INSTANCES.iter().map(|(n, _)| *n).collect()
}

/// The parts of a job's dump an operating command could write: the configuration, the server
/// nodes, the instance nodes, the item nodes and their `disabled` flags, the trigger nodes.
/// (What the instances write as they run — leader, running markers, execution records — comes
/// and goes.) The masked addresses are erased too: their numbers follow the order in which the
/// dump meets them, which running nodes change.
fn operator_view(dump: &str) -> BTreeMap<String, usize> {
    let root = format!("/{JOB}/");
    let mut entries: Vec<(String, String)> = Vec::new();
    for line in dump.lines() {
        if let Some(rest) = line.strip_prefix(&root) {
            let (path, value) = rest.split_once(" | ").unwrap_or((rest, ""));
            entries.push((path.to_owned(), value.to_owned()));
        } else if let Some(last) = entries.last_mut() {
            // A value of several lines (the configuration's YAML).
            last.1.push('\n');
            last.1.push_str(line);
        }
    }
    let mut view: BTreeMap<String, usize> = BTreeMap::new();
    for (path, value) in entries {
        let parts: Vec<&str> = path.split('/').collect();
        let kept = match parts.as_slice() {
            ["config"] | ["servers", _] => format!("{path} | {value}"),
            ["trigger"] | ["trigger", _] => format!("{path} | {value}"),
            ["instances", _] | ["sharding", _] | ["sharding", _, "disabled"] => path.clone(),
            _ => continue,
        };
        *view.entry(erase_masks(&kept)).or_default() += 1;
    }
    view
}

/// `ip12` → `ip#`.
fn erase_masks(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("ip") {
        out.push_str(&rest[..at + 2]);
        let after = &rest[at + 2..];
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 {
            out.push('#');
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

/// The items instance `id` owns, by `shardjob status --json`.
fn items_of(status: &serde_json::Value, id: &str) -> Vec<u32> {
    status["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["id"] == id)
        .flat_map(|i| i["items"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_u64().and_then(|n| u32::try_from(n).ok()))
        .collect()
}

/// The instance ids the status lists.
fn instance_ids(status: &serde_json::Value) -> BTreeSet<String> {
    status["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["id"].as_str().map(str::to_owned))
        .collect()
}

/// Every item of `0..total` listed and owned by one of `ids`.
fn all_owned_by(status: &serde_json::Value, total: u32, ids: &BTreeSet<String>) -> bool {
    let items = status["items"].as_array().cloned().unwrap_or_default();
    status["brief"]["sharding_total_count"] == total
        && items.len() == total as usize
        && items
            .iter()
            .all(|i| i["instance"].as_str().is_some_and(|id| ids.contains(id)))
}

/// Starts the fleet and waits until a fire ran every item over the three instances.
fn start(fleet: &mut Fleet) -> i64 {
    fleet.spawn_all();
    let (fire, _) = fleet.wait_shared(STEADY, 0, ITEMS, &names());
    let ids: BTreeSet<String> = names().iter().map(|n| fleet.id(n)).collect();
    fleet.wait_status("every item owned by the three instances", |s| {
        all_owned_by(s, ITEMS, &ids)
    });
    fire
}

/// Bad input, disable an item and enable it, disable a server and enable it, trigger with a
/// parameter, `config set` a new total — on one running fleet.
pub fn operate(fleet: &mut Fleet) {
    let started = now_ms();
    start(fleet);
    bad_input(fleet);
    disable_and_enable_an_item(fleet, 1);
    disable_and_enable_a_server(fleet, INSTANCES[1]);
    trigger_with_a_parameter(fleet, "backfill-2026");
    config_set_a_new_total(fleet, ITEMS + 3);
    fleet.stop_all();
    let problems = started_twice(&fleet.runs(), None);
    assert!(
        problems.is_empty(),
        "{problems:#?}\n{}",
        fleet.diagnostics()
    );
    eprintln!(
        "ops_e2e: operate: {} ms from the first start to the last exit",
        now_ms() - started
    );
}

/// Bad input against the live fleet: each exits 1 with a clear message, and the job's dump
/// (what an operator could write of it) is the same before and after; no job appears.
fn bad_input(fleet: &mut Fleet) {
    let before = fleet.ok(&["dump", JOB]);
    assert!(before.contains(&format!("/{JOB}/config | ")), "{before}");
    let bad_yaml = fleet.dir().join("bad.yaml");
    std::fs::write(
        &bad_yaml,
        format!("jobName: {JOB}\nshardingTotalCount: 0\ncron: \"not a cron\"\n"),
    )
    .unwrap();
    let bad_yaml = bad_yaml.to_str().unwrap();
    let misspelt = fleet.dir().join("misspelt.yaml");
    std::fs::write(
        &misspelt,
        format!("jobName: {JOB}\nshardingTotalCont: 3\ncron: \"* * * * * ?\"\n"),
    )
    .unwrap();
    let misspelt = misspelt.to_str().unwrap();
    let good_yaml = fleet.dir().join("nope.yaml");
    std::fs::write(
        &good_yaml,
        "jobName: nope\nshardingTotalCount: 2\ncron: \"* * * * * ?\"\n",
    )
    .unwrap();
    let good_yaml = good_yaml.to_str().unwrap();
    let out_of_range = ITEMS.to_string();
    let total_is = format!("shardingTotalCount is {ITEMS}");
    let cases: [(&[&str], &[&str]); 11] = [
        (&["status", "nope"], &["\"nope\" not found"]),
        (
            &["trigger", "nope", "--param", "x"],
            &["\"nope\" not found"],
        ),
        (&["disable", "nope", "--item", "0"], &["\"nope\" not found"]),
        (&["shutdown", "nope"], &["\"nope\" not found"]),
        (
            &["config", "set", "nope", good_yaml, "--yes"],
            &["\"nope\" not found"],
        ),
        (
            &["disable", JOB, "--item", &out_of_range],
            &["out of range", &total_is],
        ),
        (&["enable", JOB, "--item", &out_of_range], &["out of range"]),
        (
            &["shutdown", JOB, "--server", "10.9.9.9"],
            &["\"10.9.9.9\" not found"],
        ),
        (
            &["config", "set", JOB, bad_yaml, "--yes"],
            &["shardingTotalCount", "cron", "nothing was written"],
        ),
        (
            &["config", "set", JOB, misspelt, "--yes"],
            &["shardingTotalCont", "nothing was written"],
        ),
        (
            &["disable", JOB, "--server", "10.9.9.9"],
            &["\"10.9.9.9\" not found"],
        ),
    ];
    for (args, said) in cases {
        let o = fleet.cli(args);
        assert_eq!(o.code, Some(1), "shardjob {args:?}: {o}");
        assert!(o.err.starts_with("error: "), "shardjob {args:?}: {o}");
        for s in said {
            assert!(
                o.err.contains(s),
                "shardjob {args:?} does not say {s:?}: {o}"
            );
        }
    }
    // The view holds what it should, so that comparing it means something.
    let view = operator_view(&before);
    let count = |prefix: &str| {
        view.iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, n)| n)
            .sum::<usize>()
    };
    let config = "config | ";
    assert_eq!(count(config), 1, "{view:#?}");
    assert!(
        view.keys()
            .any(|k| k.starts_with(config) && k.contains(&format!("\njobName: {JOB}\n"))),
        "{view:#?}"
    );
    assert_eq!(count("servers/ip# | ENABLED"), 3, "{view:#?}");
    assert_eq!(count("instances/ip#@-@"), 3, "{view:#?}");
    assert_eq!(count("sharding/"), ITEMS as usize, "{view:#?}");
    let after = fleet.ok(&["dump", JOB]);
    assert_eq!(
        operator_view(&before),
        operator_view(&after),
        "bad input changed the job\n--- before\n{before}--- after\n{after}"
    );
    let o = fleet.cli(&["dump", "nope"]);
    assert_eq!(o.code, Some(1), "{o}");
    let jobs: serde_json::Value = serde_json::from_str(&fleet.ok(&["jobs", "--json"])).unwrap();
    let listed: BTreeSet<&str> = jobs
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| j["name"].as_str())
        .collect();
    assert_eq!(listed, BTreeSet::from([JOB, SIDE]), "{jobs}");
}

/// `shardjob disable JOB --item N`: the item stops running everywhere within one fire (the
/// fire after the command may still run it, none after); `enable` brings it back.
fn disable_and_enable_an_item(fleet: &mut Fleet, item: u32) {
    let out = fleet.ok(&["disable", JOB, "--item", &item.to_string()]);
    assert!(out.contains(&format!("disabled item {item}")), "{out}");
    let done = now_ms();
    // From this fire on the item must not run anywhere.
    let cut = next_fire(done) + 1000;
    fleet.wait_status("the item DISABLED in the registry", |s| {
        s["items"][item as usize]["status"] == "DISABLED"
    });
    let others: BTreeSet<u32> = (0..ITEMS).filter(|i| *i != item).collect();
    fleet.wait_for(WAIT, "three fires of the other items", |runs| {
        (complete_fires(runs, cut, &others).len() >= 3).then_some(())
    });
    let late: Vec<Run> = fleet
        .runs()
        .into_iter()
        .filter(|r| r.item == item && r.fire >= cut)
        .collect();
    assert!(
        late.is_empty(),
        "item {item} ran after it was disabled at {done}: {late:#?}\n{}",
        fleet.diagnostics()
    );

    let out = fleet.ok(&["enable", JOB, "--item", &item.to_string()]);
    assert!(out.contains(&format!("enabled item {item}")), "{out}");
    let done = now_ms();
    fleet.wait_for(WAIT, "the item to run again", |runs| {
        runs.iter()
            .any(|r| r.item == item && r.scheduled() && r.fire > done)
            .then_some(())
    });
    fleet.wait_status("the item enabled in the registry", |s| {
        s["items"][item as usize]["status"] != "DISABLED"
    });
    eprintln!("ops_e2e: item {item} disabled from fire {cut} on, then enabled again");
}

/// `shardjob disable JOB --server IP`: the server's instance gives up its items and the others
/// run them all; `enable` shares them over the three again.
fn disable_and_enable_a_server(fleet: &mut Fleet, (name, ip): (&str, &str)) {
    let out = fleet.ok(&["disable", JOB, "--server", ip]);
    assert!(
        out.contains(&format!("disabled job {JOB} on server {ip}")),
        "{out}"
    );
    let done = now_ms();
    let rest: Vec<&str> = names().into_iter().filter(|n| *n != name).collect();
    let (fire, _) = fleet.wait_shared(WAIT, done, ITEMS, &rest);
    let id = fleet.id(name);
    fleet.wait_status("the server DISABLED, its instance without items", |s| {
        let mine = s["instances"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i["id"] == id.as_str());
        mine.is_some_and(|i| i["server_disabled"] == true)
            && items_of(s, &id).is_empty()
            && s["brief"]["status"] == "OK"
    });
    let all: BTreeSet<u32> = (0..ITEMS).collect();
    fleet.wait_for(WAIT, "two more fires without the disabled server", |runs| {
        (complete_fires(runs, fire, &all).len() >= 3).then_some(())
    });
    let more: Vec<Run> = fleet
        .runs()
        .into_iter()
        .filter(|r| r.who == name && r.fire >= fire)
        .collect();
    assert!(
        more.is_empty(),
        "{name} ran items while its server was disabled: {more:#?}\n{}",
        fleet.diagnostics()
    );

    let without = fire - done;
    let out = fleet.ok(&["enable", JOB, "--server", ip]);
    assert!(
        out.contains(&format!("enabled job {JOB} on server {ip}")),
        "{out}"
    );
    let done = now_ms();
    let (back, _) = fleet.wait_shared(WAIT, done, ITEMS, &names());
    eprintln!(
        "ops_e2e: server {ip} disabled: fire {fire} ran every item without it ({without} ms after the \
         command); enabled: fire {back} shared by the three again"
    );
}

/// `shardjob trigger JOB --param P`: each instance runs its items once with the parameter.
fn trigger_with_a_parameter(fleet: &mut Fleet, parameter: &str) {
    let status = fleet.status();
    let owner: BTreeMap<u32, String> = names()
        .into_iter()
        .flat_map(|n| {
            let id = fleet.id(n);
            items_of(&status, &id)
                .into_iter()
                .map(move |i| (i, n.to_owned()))
        })
        .collect();
    assert_eq!(owner.len(), ITEMS as usize, "{status:#}");
    let sent = now_ms();
    let out = fleet.ok(&["trigger", JOB, "--param", parameter]);
    assert!(out.contains("on 3 instance(s)"), "{out}");
    let with = |r: &Run| r.kind == "TRIGGER" && r.parameter == parameter;
    let last = fleet.wait_for(WAIT, "every item to run the trigger", |runs| {
        let ran: BTreeSet<u32> = runs.iter().filter(|r| with(r)).map(|r| r.item).collect();
        (ran.len() == ITEMS as usize)
            .then(|| runs.iter().filter(|r| with(r)).map(|r| r.start).max())
    });
    let last = last.unwrap_or(sent);
    fleet.wait_status("every trigger taken", |s| {
        s["pending_triggers"].as_array().is_some_and(Vec::is_empty)
    });
    // Two whole fires after the last trigger run: time for a second run of it to show.
    let all: BTreeSet<u32> = (0..ITEMS).collect();
    fleet.wait_for(WAIT, "two fires after the trigger", |runs| {
        (complete_fires(runs, next_fire(last), &all).len() >= 2).then_some(())
    });
    let runs = fleet.runs();
    for item in 0..ITEMS {
        let ran: Vec<&Run> = runs.iter().filter(|r| with(r) && r.item == item).collect();
        assert_eq!(
            ran.len(),
            1,
            "item {item} ran the trigger {} times: {ran:#?}\n{}",
            ran.len(),
            fleet.diagnostics()
        );
        assert_eq!(
            ran[0].who, owner[&item],
            "item {item} ran the trigger off its owner"
        );
        assert!(ran[0].start >= sent, "{:?}", ran[0]);
    }
    let leaked: Vec<&Run> = runs
        .iter()
        .filter(|r| r.kind != "TRIGGER" && r.parameter == parameter)
        .collect();
    assert!(
        leaked.is_empty(),
        "scheduled runs took the trigger's parameter: {leaked:#?}"
    );
    eprintln!(
        "ops_e2e: trigger with {parameter:?}: every item ran once, the last {} ms after the command",
        last - sent
    );
}

/// `shardjob config set JOB FILE --yes` with a new `shardingTotalCount`: the items re-shard,
/// every instance runs under the new total, every new item runs.
fn config_set_a_new_total(fleet: &mut Fleet, total: u32) {
    let yaml = fleet.ok(&["config", "get", JOB]);
    let old = format!("shardingTotalCount: {ITEMS}\n");
    assert!(yaml.contains(&old), "{yaml}");
    let file = fleet.dir().join("new-total.yaml");
    std::fs::write(
        &file,
        yaml.replace(&old, &format!("shardingTotalCount: {total}\n")),
    )
    .unwrap();
    let out = fleet.ok(&["config", "set", JOB, file.to_str().unwrap(), "--yes"]);
    assert!(
        out.contains(&format!("shardingTotalCount: {ITEMS} -> {total}")) && out.contains("applied"),
        "{out}"
    );
    let done = now_ms();
    let (fire, ran) = fleet.wait_shared(WAIT, done, total, &names());
    let ids: BTreeSet<String> = names().iter().map(|n| fleet.id(n)).collect();
    fleet.wait_status("the new items owned", |s| all_owned_by(s, total, &ids));
    // One more fire, then nothing ran under the old total since.
    fleet.wait_for(WAIT, "a fire after the re-shard", |runs| {
        (runs.iter().any(|r| r.scheduled() && r.fire > fire)).then_some(())
    });
    let stale: Vec<Run> = fleet
        .runs()
        .into_iter()
        .filter(|r| r.fire >= fire && r.total != total)
        .collect();
    assert!(stale.is_empty(), "runs under the old total: {stale:#?}");
    eprintln!(
        "ops_e2e: config set {ITEMS} -> {total} items: fire {fire} ({} ms after the command) ran them all: {ran:?}",
        fire - done
    );
}

/// `shardjob shutdown JOB --server IP` of the job's leader: its items run elsewhere within 1 s
/// of its next fire window, it starts nothing more of the job, its instance node stays gone,
/// and it runs the other job on.
pub fn operator_shutdown(fleet: &mut Fleet) {
    start(fleet);
    // The leader: the hardest case (the others elect a new one before they re-shard), and the
    // same whichever instance registered first.
    let status = fleet.status();
    let leader = status["leader"].as_str().unwrap_or_default().to_owned();
    let Some(&(victim, ip)) = INSTANCES.iter().find(|(n, _)| fleet.id(n) == leader) else {
        panic!("no leader among the instances: {status:#}");
    };
    let id = fleet.id(victim);
    let items = items_of(&status, &id);
    assert!(!items.is_empty(), "{status:#}");
    let out = fleet.ok(&["shutdown", JOB, "--server", ip]);
    assert!(
        out.contains(&format!("shut down instance {id} of job {JOB}")) && !out.contains(SIDE),
        "{out}"
    );
    let done = now_ms();
    // Its next fire window: the fire after the command may still start on it; none after.
    let window = next_fire(done);
    let cut = window + 1000;
    let moved: Vec<(u32, i64, i64)> =
        fleet.wait_for(WAIT, "the victim's items on the others", |runs| {
            let moved: Vec<(u32, i64, i64)> = items
                .iter()
                .filter_map(|i| {
                    runs.iter()
                        .find(|r| {
                            r.item == *i && r.who != victim && r.scheduled() && r.fire >= window
                        })
                        .map(|r| (*i, r.fire, r.start))
                })
                .collect();
            (moved.len() == items.len()).then_some(moved)
        });
    let late: Vec<&(u32, i64, i64)> = moved.iter().filter(|m| m.1 > cut).collect();
    assert!(
        late.is_empty(),
        "items of {victim} ran elsewhere only after fire {cut} (shut down at {done}): {late:?}\n{}",
        fleet.diagnostics()
    );
    let takeover = moved.iter().map(|m| m.2 - window).max().unwrap_or(0);
    // Three whole fires after that, on the others only.
    let all: BTreeSet<u32> = (0..ITEMS).collect();
    let resumed = moved.iter().map(|m| m.1).max().unwrap_or(cut);
    fleet.wait_for(WAIT, "three fires after the takeover", |runs| {
        (complete_fires(runs, resumed + 1000, &all).len() >= 3).then_some(())
    });
    let runs = fleet.runs();
    let more: Vec<&Run> = runs
        .iter()
        .filter(|r| r.who == victim && r.fire >= cut)
        .collect();
    assert!(
        more.is_empty(),
        "{victim} went on running the job after its shutdown at {done}: {more:#?}\n{}",
        fleet.diagnostics()
    );
    let problems = started_twice(&runs, Some(victim));
    assert!(
        problems.is_empty(),
        "{problems:#?}\n{}",
        fleet.diagnostics()
    );
    let status = fleet.status();
    let ids = instance_ids(&status);
    assert!(
        !ids.contains(&id),
        "{id} is an instance of the job again after its shutdown: {status:#}\n{}",
        fleet.diagnostics()
    );
    let others: BTreeSet<String> = names()
        .into_iter()
        .filter(|n| *n != victim)
        .map(|n| fleet.id(n))
        .collect();
    assert!(all_owned_by(&status, ITEMS, &others), "{status:#}");
    // The other job is not touched: the victim still runs it.
    let side = fleet.status_of(SIDE);
    assert!(instance_ids(&side).contains(&id), "{side:#}");
    fleet.wait_side(WAIT, "the victim running the other job", |runs| {
        runs.iter()
            .any(|r| r.who == victim && r.fire > resumed)
            .then_some(())
    });
    fleet.stop_all();
    eprintln!(
        "ops_e2e: shutdown of {victim}: its items {items:?} ran elsewhere from fire {window} on, \
         the last starting {takeover} ms into that window"
    );
}

/// `shardjob remove JOB`: every instance leaves the job (no instance or server node comes
/// back, nothing more runs) and runs the other job on; the configuration stays, so the job
/// lists as CRASHED. The CLI has no command that puts instances back (they rejoin when they
/// restart): the scenario ends there.
pub fn remove(fleet: &mut Fleet) {
    start(fleet);
    let out = fleet.ok(&["remove", JOB]);
    for n in names() {
        let id = fleet.id(n);
        assert!(out.contains(&format!("shut down instance {id}")), "{out}");
    }
    assert!(!out.contains(SIDE), "{out}");
    assert_eq!(out.matches("removed server").count(), 3, "{out}");
    let done = now_ms();
    let cut = next_fire(done) + 1000;
    // Every instance and server node gone, and none back over three fire windows from `cut`.
    let gone = |s: &serde_json::Value| {
        s["instances"].as_array().is_some_and(Vec::is_empty)
            && s["servers"].as_array().is_some_and(Vec::is_empty)
    };
    fleet.wait_status("every instance and server node gone", gone);
    let watch_until = cut + 3000;
    while now_ms() < watch_until {
        let status = fleet.status();
        assert!(
            gone(&status),
            "an instance came back after `remove`: {status:#}\n{}",
            fleet.diagnostics()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let more: Vec<Run> = fleet.runs().into_iter().filter(|r| r.fire >= cut).collect();
    assert!(
        more.is_empty(),
        "the job ran after `remove` at {done}: {more:#?}\n{}",
        fleet.diagnostics()
    );
    let jobs: serde_json::Value = serde_json::from_str(&fleet.ok(&["jobs", "--json"])).unwrap();
    let brief = |name: &str| {
        jobs.as_array()
            .into_iter()
            .flatten()
            .find(|j| j["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} not listed: {jobs}"))
    };
    assert_eq!(brief(JOB)["instance_count"], 0, "{jobs}");
    assert_eq!(brief(JOB)["status"], "CRASHED", "{jobs}");
    assert_eq!(brief(SIDE)["instance_count"], 3, "{jobs}");
    // Every instance runs the other job on.
    fleet.wait_side(WAIT, "every instance running the other job", |runs| {
        let who: BTreeSet<&str> = runs
            .iter()
            .filter(|r| r.fire >= watch_until)
            .map(|r| r.who.as_str())
            .collect();
        (who.len() == INSTANCES.len()).then_some(())
    });
    fleet.stop_all();
}
