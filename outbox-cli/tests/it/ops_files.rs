//! The operator's files against the metrics the crates declare: the Grafana dashboard
//! (`ops/grafana/outbox.json`) and the Prometheus rules (`ops/prometheus/alerts.yaml`) name only
//! declared metrics and cover the eight measures, and the metric reference in
//! `docs/observability.md` lists every declared metric with its type. With `promtool` on `PATH`,
//! the rules pass `promtool check rules`, every dashboard query parses, and each alert fires on
//! synthetic series for its fault and stays quiet on a healthy system; without it those checks
//! are skipped, and the test says so.
//!
//! `cargo test -p outbox-cli --test ops_files` (no server needed).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value as Json;
use serde_norway::Value as Yaml;

/// The files that declare the product's metric names, as string literals.
const DECLARING: [&str; 4] = [
    "outbox-relayer/src/metrics.rs",
    "outbox-producer/src/metrics.rs",
    "outbox-ops/src/metrics.rs",
    "outbox-inbox/src/metrics.rs",
];

/// The suffixes an exporter adds to a histogram's (or summary's) name.
const HISTOGRAM_SUFFIXES: [&str; 3] = ["_bucket", "_sum", "_count"];

/// One metric per measure an operator watches, each of which must have a dashboard panel.
const MEASURES: [&str; 13] = [
    "outbox_events_waiting",
    "outbox_oldest_waiting_age_seconds",
    "outbox_events_created_total",
    "outbox_published_total",
    "outbox_commit_to_confirm_seconds",
    "outbox_publish_failures_total",
    "outbox_events_quarantined",
    "outbox_lease_takeovers_total",
    "outbox_expired_leases",
    "outbox_largest_entity_gap",
    "outbox_oldest_snapshot_seconds",
    "inbox_events_total",
    "inbox_oldest_parked_age_seconds",
];

const DASHBOARD: &str = "ops/grafana/outbox.json";
const ALERTS: &str = "ops/prometheus/alerts.yaml";
const DOC: &str = "docs/observability.md";
const EXPORTER: &str = "outbox-cli/src/serve.rs";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(relative: &str) -> String {
    let path = root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Every token `outbox_...` or `inbox_...` in `text` that stands as a word of its own.
fn metric_tokens(text: &str) -> BTreeSet<String> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut found = BTreeSet::new();
    for (start, _) in text.match_indices(['o', 'i']) {
        let rest = &text[start..];
        if !(rest.starts_with("outbox_") || rest.starts_with("inbox_")) {
            continue;
        }
        if text[..start].chars().next_back().is_some_and(is_word) {
            continue;
        }
        let len =
            rest.find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')).unwrap_or(rest.len());
        let token = &rest[..len];
        if rest[len..].chars().next().is_some_and(is_word) || token.ends_with('_') {
            // Upper case or a trailing underscore: not a metric name.
            continue;
        }
        found.insert(token.to_owned());
    }
    found
}

/// `token` without an exporter suffix when what remains is a histogram; `token` otherwise.
fn base_name(token: &str, histograms: &BTreeSet<String>) -> String {
    HISTOGRAM_SUFFIXES
        .iter()
        .find_map(|suffix| token.strip_suffix(suffix).filter(|base| histograms.contains(*base)))
        .unwrap_or(token)
        .to_owned()
}

/// The metric names the product declares, with the kind each is described as.
#[derive(Debug, Default)]
struct Declared {
    /// Name to kind (`counter`, `gauge`, `histogram`), or `None` if never described.
    kinds: BTreeMap<String, Option<&'static str>>,
}

impl Declared {
    fn read() -> Self {
        let mut declared = Self::default();
        for file in DECLARING {
            let before = declared.kinds.len();
            declared.add(&read(file));
            assert!(declared.kinds.len() > before, "no metric name found in {file}");
        }
        declared
    }

    /// Adds the `"outbox_..."` / `"inbox_..."` string literals of `source`, and the kind its
    /// `describe_*!` calls give each (through the constant that holds the name).
    fn add(&mut self, source: &str) {
        let mut constants = BTreeMap::new();
        for line in source.lines().map(str::trim).filter(|l| !l.starts_with("//")) {
            for literal in line.split('"').skip(1).step_by(2) {
                if metric_tokens(literal).contains(literal) {
                    self.kinds.entry(literal.to_owned()).or_default();
                    if let Some(name) = line.split_once("const ").and_then(|(_, rest)| rest.split(':').next()) {
                        constants.insert(name.trim().to_owned(), literal.to_owned());
                    }
                }
            }
        }
        for (macro_name, kind) in
            [("describe_counter!(", "counter"), ("describe_gauge!(", "gauge"), ("describe_histogram!(", "histogram")]
        {
            for (at, _) in source.match_indices(macro_name) {
                let rest = &source[at + macro_name.len()..];
                let argument = rest.split([',', ')']).next().unwrap_or_default().trim();
                let name = constants.get(argument).cloned().unwrap_or_else(|| argument.trim_matches('"').to_owned());
                if let Some(slot) = self.kinds.get_mut(&name) {
                    *slot = Some(kind);
                }
            }
        }
    }

    fn names(&self) -> BTreeSet<String> {
        self.kinds.keys().cloned().collect()
    }

    fn histograms(&self) -> BTreeSet<String> {
        self.kinds.iter().filter(|(_, k)| **k == Some("histogram")).map(|(n, _)| n.clone()).collect()
    }

    /// The metrics `text` refers to, exporter suffixes of histograms stripped.
    fn referenced(&self, text: &str) -> BTreeSet<String> {
        let histograms = self.histograms();
        metric_tokens(text).iter().map(|t| base_name(t, &histograms)).collect()
    }

    /// The names in `referenced` that the product does not declare.
    fn unknown(&self, referenced: &BTreeSet<String>) -> Vec<String> {
        referenced.iter().filter(|n| !self.kinds.contains_key(*n)).cloned().collect()
    }
}

/// A dashboard panel: its title and the PromQL of its queries.
struct Panel {
    title: String,
    exprs: Vec<String>,
}

fn dashboard() -> Json {
    serde_json::from_str(&read(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD} is not valid JSON: {e}"))
}

/// Every panel of the dashboard, rows' nested panels included.
fn panels(dashboard: &Json) -> Vec<Panel> {
    fn walk(list: &Json, out: &mut Vec<Panel>) {
        for panel in list.as_array().into_iter().flatten() {
            let exprs: Vec<String> = panel["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["expr"].as_str().map(str::to_owned))
                .collect();
            let title = panel["title"].as_str().unwrap_or_default().to_owned();
            out.push(Panel { title, exprs });
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// The queries of the dashboard's template variables.
fn variable_queries(dashboard: &Json) -> Vec<String> {
    let variables = dashboard["templating"]["list"].as_array().into_iter().flatten();
    variables
        .filter(|v| v["type"] == "query")
        .filter_map(|v| v["query"].as_str().or_else(|| v["query"]["query"].as_str()).map(str::to_owned))
        .collect()
}

/// An alerting rule of the rule file.
struct Rule {
    alert: String,
    expr: String,
    body: Yaml,
}

fn rules() -> Vec<Rule> {
    let file: Yaml =
        serde_norway::from_str(&read(ALERTS)).unwrap_or_else(|e| panic!("{ALERTS} is not valid YAML: {e}"));
    let groups = file["groups"].as_sequence().unwrap_or_else(|| panic!("{ALERTS} has no `groups` list"));
    let mut rules = Vec::new();
    for group in groups {
        let name = group["name"].as_str().unwrap_or_else(|| panic!("a group of {ALERTS} has no name"));
        let list = group["rules"].as_sequence().unwrap_or_else(|| panic!("group {name} has no `rules` list"));
        for rule in list {
            let alert = rule["alert"].as_str().unwrap_or_else(|| panic!("a rule of group {name} is not an alert"));
            let expr = rule["expr"].as_str().unwrap_or_else(|| panic!("alert {alert} has no expr"));
            rules.push(Rule { alert: alert.to_owned(), expr: expr.to_owned(), body: rule.clone() });
        }
    }
    assert!(!rules.is_empty(), "{ALERTS} has no alerting rule");
    rules
}

#[test]
fn the_extractor_sees_every_name_and_strips_only_histogram_suffixes() {
    let histograms = BTreeSet::from(["outbox_commit_to_confirm_seconds".to_owned()]);
    let text = r#"sum(rate(outbox_nonexistent_total[5m])) / max by (consumer) (inbox_events_total{x="outbox"})
        + outbox_commit_to_confirm_seconds_sum + outbox_relay_claims_count + OUTBOX_X + xoutbox_y + "outbox_events""#;
    let tokens = metric_tokens(text);
    assert_eq!(
        tokens,
        BTreeSet::from(
            [
                "outbox_nonexistent_total",
                "inbox_events_total",
                "outbox_commit_to_confirm_seconds_sum",
                "outbox_relay_claims_count",
                "outbox_events"
            ]
            .map(str::to_owned)
        )
    );
    assert_eq!(base_name("outbox_commit_to_confirm_seconds_sum", &histograms), "outbox_commit_to_confirm_seconds");
    assert_eq!(base_name("outbox_commit_to_confirm_seconds_bucket", &histograms), "outbox_commit_to_confirm_seconds");
    assert_eq!(base_name("outbox_relay_claims_count", &histograms), "outbox_relay_claims_count", "not a histogram");

    let declared = Declared::read();
    let unknown = declared.unknown(&declared.referenced("rate(outbox_nonexistent_total[5m]) + outbox_published_total"));
    assert_eq!(unknown, ["outbox_nonexistent_total"], "an undeclared name must be reported");
}

#[test]
fn declarations_are_read_from_the_metrics_modules() {
    let mut declared = Declared::default();
    declared.add(
        "/// Events, `outbox_in_a_comment` (\"outbox_quoted_in_a_comment\").\n\
         pub(crate) const SEEN: &str = \"outbox_seen_total\";\n\
         pub(crate) const TOOK: &str = \"outbox_took_seconds\";\n\
         fn describe() {\n\
             describe_counter!(SEEN, \"Vacuums of outbox_events by the relay.\");\n\
             describe_histogram!(TOOK, Unit::Seconds, \"How long.\");\n\
         }\n",
    );
    let kinds: Vec<_> = declared.kinds.iter().map(|(n, k)| (n.as_str(), *k)).collect();
    assert_eq!(kinds, [("outbox_seen_total", Some("counter")), ("outbox_took_seconds", Some("histogram"))]);
}

#[test]
fn the_dashboard_and_the_alerts_name_only_declared_metrics() {
    let declared = Declared::read();
    let dashboard = dashboard();
    let mut problems = Vec::new();
    for panel in panels(&dashboard) {
        for expr in &panel.exprs {
            let unknown = declared.unknown(&declared.referenced(expr));
            if !unknown.is_empty() {
                problems.push(format!("{DASHBOARD}, panel {:?}: {unknown:?} in `{expr}`", panel.title));
            }
        }
    }
    for query in variable_queries(&dashboard) {
        let unknown = declared.unknown(&declared.referenced(&query));
        if !unknown.is_empty() {
            problems.push(format!("{DASHBOARD}, a variable: {unknown:?} in `{query}`"));
        }
    }
    for rule in rules() {
        let unknown = declared.unknown(&declared.referenced(&rule.expr));
        if !unknown.is_empty() {
            problems.push(format!("{ALERTS}, alert {}: {unknown:?} in `{}`", rule.alert, rule.expr.trim()));
        }
    }
    assert!(problems.is_empty(), "metrics the product does not declare (in {DECLARING:?}):\n{}", problems.join("\n"));
}

#[test]
fn every_measure_has_a_panel() {
    let declared = Declared::read();
    let panels = panels(&dashboard());
    let shown: BTreeSet<String> = panels.iter().flat_map(|p| &p.exprs).flat_map(|e| declared.referenced(e)).collect();
    let missing: Vec<_> = MEASURES.iter().filter(|m| !shown.contains(**m)).collect();
    assert!(missing.is_empty(), "no panel of {DASHBOARD} queries {missing:?}");
    assert!(panels.iter().all(|p| !p.title.is_empty()), "every panel of {DASHBOARD} has a title");
}

#[test]
fn the_dashboard_has_its_variables_and_unique_panel_ids() {
    let dashboard = dashboard();
    let variables: BTreeMap<&str, &str> = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| Some((v["name"].as_str()?, v["type"].as_str()?)))
        .collect();
    assert_eq!(variables.get("DS_PROMETHEUS"), Some(&"datasource"), "{variables:?}");
    assert_eq!(variables.get("consumer"), Some(&"query"), "{variables:?}");
    assert!(
        variable_queries(&dashboard).iter().any(|q| q.replace(' ', "") == "label_values(inbox_events_total,consumer)"),
        "the consumer variable takes its values from inbox_events_total"
    );

    let mut ids = BTreeSet::new();
    fn collect(list: &Json, ids: &mut BTreeSet<i64>, datasources: &mut Vec<String>) {
        for panel in list.as_array().into_iter().flatten() {
            let id = panel["id"].as_i64().unwrap_or_else(|| panic!("panel {} has no id", panel["title"]));
            assert!(ids.insert(id), "panel id {id} is used twice");
            if panel["type"] != "row" {
                datasources.push(panel["datasource"]["uid"].as_str().unwrap_or_default().to_owned());
            }
            collect(&panel["panels"], ids, datasources);
        }
    }
    let mut datasources = Vec::new();
    collect(&dashboard["panels"], &mut ids, &mut datasources);
    assert!(
        datasources.iter().all(|d| d == "${DS_PROMETHEUS}"),
        "every panel queries ${{DS_PROMETHEUS}}: {datasources:?}"
    );
}

#[test]
fn histograms_are_queried_as_the_exporter_exports_them() {
    // `outbox relay` builds PrometheusBuilder::new() without buckets: histograms come out as
    // summaries (`{quantile=...}`, `_sum`, `_count`), and no `_bucket` series exists.
    let exporter = read(EXPORTER);
    assert!(exporter.contains("PrometheusBuilder::new()"), "{EXPORTER} no longer builds the exporter as expected");
    if exporter.contains("set_buckets") {
        return;
    }
    let mut exprs: Vec<String> = panels(&dashboard()).into_iter().flat_map(|p| p.exprs).collect();
    exprs.extend(rules().into_iter().map(|r| r.expr));
    let wrong: Vec<_> = exprs.iter().filter(|e| e.contains("histogram_quantile") || e.contains("_bucket")).collect();
    assert!(wrong.is_empty(), "queries for histogram buckets the exporter does not export: {wrong:?}");
}

#[test]
fn every_alert_is_complete() {
    let mut names = BTreeSet::new();
    for rule in rules() {
        let r = &rule.body;
        assert!(names.insert(rule.alert.clone()), "alert {} is defined twice", rule.alert);
        assert!(r["for"].as_str().is_some(), "alert {} has no `for`", rule.alert);
        let severity = r["labels"]["severity"].as_str();
        assert!(
            matches!(severity, Some("critical" | "warning" | "info")),
            "alert {} has severity {severity:?}",
            rule.alert
        );
        for annotation in ["summary", "description"] {
            let text = r["annotations"][annotation].as_str().unwrap_or_default();
            assert!(!text.trim().is_empty(), "alert {} has no {annotation}", rule.alert);
        }
    }
}

#[test]
fn the_metric_reference_lists_every_declared_metric() {
    let declared = Declared::read();
    let doc = read(DOC);
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Metric reference\n"))
        .unwrap_or_else(|| panic!("{DOC} has no \"## Metric reference\" section"));
    let rows: Vec<&str> = section.lines().filter(|l| l.starts_with('|')).skip(2).collect();
    assert!(!rows.is_empty(), "the metric reference of {DOC} has no table");

    let mut listed = BTreeSet::new();
    let mut problems = Vec::new();
    for row in rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (names, kind) = (metric_tokens(cells[1]), cells.get(2).copied().unwrap_or_default());
        let [name] = names.iter().collect::<Vec<_>>()[..] else {
            problems.push(format!("a row names {names:?}, not one metric: {row}"));
            continue;
        };
        if !listed.insert(name.clone()) {
            problems.push(format!("{name} is listed twice"));
        }
        match declared.kinds.get(name) {
            None => problems.push(format!("{name} is listed but no crate declares it")),
            Some(None) => problems.push(format!("{name} is declared but never described (describe_*!)")),
            Some(Some(described)) if *described != kind => {
                problems.push(format!("{name} is listed as a {kind:?} but described as a {described}"));
            }
            Some(Some(_)) => {}
        }
    }
    for name in declared.names().difference(&listed) {
        problems.push(format!("{name} is declared but missing from the table"));
    }
    assert!(problems.is_empty(), "{DOC}, metric reference:\n{}", problems.join("\n"));
}

/// The series of a healthy system: one relay, one producer, one consumer; a few transient
/// failures early on, none since.
const HEALTHY: [(&str, &str); 12] = [
    (r#"up{job="outbox-relayer", instance="relay-1:9187"}"#, "1x60"),
    (r#"outbox_relay_claims_total{job="outbox-relayer", instance="relay-1:9187", found="none"}"#, "0+60x60"),
    (r#"outbox_events_created_total{job="orders", instance="orders-1:9000"}"#, "0+600x60"),
    (r#"outbox_published_total{job="outbox-relayer", instance="relay-1:9187"}"#, "0+600x60"),
    (r#"outbox_publish_failures_total{job="outbox-relayer", instance="relay-1:9187", kind="transient"}"#, "0 1 2x58"),
    (r#"outbox_oldest_waiting_age_seconds{job="outbox-relayer", instance="relay-1:9187"}"#, "0.01x60"),
    (r#"outbox_events_held{job="outbox-relayer", instance="relay-1:9187"}"#, "0x60"),
    (r#"outbox_expired_leases{job="outbox-relayer", instance="relay-1:9187"}"#, "0x60"),
    (r#"outbox_oldest_snapshot_seconds{job="outbox-relayer", instance="relay-1:9187"}"#, "0x10 2x50"),
    (
        r#"inbox_events_total{job="shipping", instance="shipping-1:9000", consumer="shipping", outcome="applied"}"#,
        "0+600x60",
    ),
    (r#"inbox_oldest_parked_age_seconds{job="shipping", instance="shipping-1:9000", consumer="shipping"}"#, "0x60"),
    (r#"inbox_events_failed{job="shipping", instance="shipping-1:9000", consumer="shipping"}"#, "0x60"),
];

/// A fault: series replacing or added to [`HEALTHY`], and the alerts firing at [`EVAL_AT`].
struct Scenario {
    fault: &'static str,
    series: &'static [(&'static str, &'static str)],
    firing: &'static [&'static str],
}

const EVAL_AT: &str = "40m";

const SCENARIOS: &[Scenario] = &[
    Scenario { fault: "healthy", series: &[], firing: &[] },
    Scenario {
        fault: "an event waits for 25 minutes",
        series: &[(
            r#"outbox_oldest_waiting_age_seconds{job="outbox-relayer", instance="relay-1:9187"}"#,
            "0.01x15 0+60x45",
        )],
        firing: &["OutboxOldestWaitingTooOld"],
    },
    Scenario {
        fault: "events held behind a quarantine",
        series: &[(r#"outbox_events_held{job="outbox-relayer", instance="relay-1:9187"}"#, "0x10 3x50")],
        firing: &["OutboxEventsHeld"],
    },
    Scenario {
        fault: "a relay's first quarantine",
        series: &[(r#"outbox_quarantined_total{job="outbox-relayer", instance="relay-1:9187"}"#, "_x35 1x25")],
        firing: &["OutboxQuarantineGrowing"],
    },
    Scenario {
        fault: "the quarantined count grows",
        series: &[(
            r#"outbox_events_quarantined{job="outbox-relayer", instance="relay-1:9187", kind="contract"}"#,
            "1x30 2x30",
        )],
        firing: &["OutboxQuarantineGrowing"],
    },
    Scenario {
        fault: "producers write twice what the relays publish",
        series: &[(r#"outbox_published_total{job="outbox-relayer", instance="relay-1:9187"}"#, "0+300x60")],
        firing: &["OutboxCreatedAbovePublished"],
    },
    Scenario {
        fault: "the broker is unavailable",
        series: &[(
            r#"outbox_publish_failures_total{job="outbox-relayer", instance="relay-1:9187", kind="unavailable"}"#,
            "0+10x60",
        )],
        firing: &["OutboxPublishFailures"],
    },
    Scenario {
        fault: "claims outlive their lease",
        series: &[(r#"outbox_expired_leases{job="outbox-relayer", instance="relay-1:9187"}"#, "0x20 4x40")],
        firing: &["OutboxExpiredLeases"],
    },
    Scenario {
        fault: "one database of a fleet is down for 20 minutes, the other answers",
        series: &[
            (
                r#"outbox_fleet_database_failing{job="outbox-relayer", instance="relay-1:9187", database="tenant-a"}"#,
                "0x10 1x40",
            ),
            (
                r#"outbox_fleet_database_failing{job="outbox-relayer", instance="relay-1:9187", database="tenant-b"}"#,
                "0x50",
            ),
        ],
        firing: &["OutboxDatabaseFailing"],
    },
    Scenario {
        fault: "a database handed from one process to another stays relayed; one left to a process that does not list it is not",
        series: &[
            (
                r#"outbox_fleet_database_relayed{job="outbox-relayer", instance="relay-1:9187", database="tenant-a"}"#,
                "1x10 0x40",
            ),
            (
                r#"outbox_fleet_database_relayed{job="outbox-relayer", instance="relay-2:9187", database="tenant-a"}"#,
                "0x10 1x40",
            ),
            // relay-2's list lacks tenant-b: it exports nothing for it, and relay-1 gave it away.
            (
                r#"outbox_fleet_database_relayed{job="outbox-relayer", instance="relay-1:9187", database="tenant-b"}"#,
                "1x10 0x40",
            ),
        ],
        firing: &["OutboxDatabaseNotRelayed"],
    },
    Scenario {
        fault: "a session holds a snapshot for 30 minutes",
        series: &[(r#"outbox_oldest_snapshot_seconds{job="outbox-relayer", instance="relay-1:9187"}"#, "0x10 0+60x50")],
        firing: &["OutboxSnapshotHeld"],
    },
    Scenario {
        fault: "a relay takes rows over",
        series: &[(r#"outbox_lease_takeovers_total{job="outbox-relayer", instance="relay-1:9187"}"#, "_x35 5x25")],
        firing: &["OutboxLeaseTakeovers"],
    },
    Scenario {
        fault: "the only relay is down",
        series: &[
            (r#"up{job="outbox-relayer", instance="relay-1:9187"}"#, "1x20 0x40"),
            (
                r#"outbox_relay_claims_total{job="outbox-relayer", instance="relay-1:9187", found="none"}"#,
                "0+60x20 _x40",
            ),
        ],
        firing: &["OutboxRelayDown", "OutboxRelayMetricsAbsent"],
    },
    Scenario {
        fault: "a relay stops claiming",
        series: &[(
            r#"outbox_relay_claims_total{job="outbox-relayer", instance="relay-1:9187", found="none"}"#,
            "0+60x20 1200x40",
        )],
        firing: &["OutboxRelayNotClaiming"],
    },
    Scenario {
        fault: "a gap does not fill",
        series: &[(
            r#"inbox_oldest_parked_age_seconds{job="shipping", instance="shipping-1:9000", consumer="shipping"}"#,
            "0x10 60+60x50",
        )],
        firing: &["InboxGapTooOld"],
    },
    Scenario {
        fault: "events failed for good",
        series: &[(
            r#"inbox_events_failed{job="shipping", instance="shipping-1:9000", consumer="shipping"}"#,
            "0x30 2x30",
        )],
        firing: &["InboxFailedEvents"],
    },
    Scenario {
        fault: "a consumer's first dead letter",
        series: &[(
            r#"inbox_dead_letters_total{job="shipping", instance="shipping-1:9000", consumer="shipping", reason="handler_failed"}"#,
            "_x35 1x25",
        )],
        firing: &["InboxDeadLetters"],
    },
];

/// A `promtool test rules` file: `scenario` on top of [`HEALTHY`], and the alerts firing then.
fn rules_test(alerts: &Path, scenario: &Scenario) -> String {
    let mut series: Vec<(&str, &str)> = HEALTHY.to_vec();
    for &(name, values) in scenario.series {
        match series.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = values,
            None => series.push((name, values)),
        }
    }
    let mut text = format!(
        "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n",
        Json::from(alerts.display().to_string())
    );
    for (name, values) in series {
        text += &format!("      - series: '{name}'\n        values: '{values}'\n");
    }
    text += "    promql_expr_test:\n      - expr: count by (alertname) (ALERTS{alertstate=\"firing\"})\n";
    text += &format!("        eval_time: {EVAL_AT}\n        exp_samples:");
    if scenario.firing.is_empty() {
        text += " []\n";
    } else {
        text += "\n";
        for alert in scenario.firing {
            text += &format!("          - labels: '{{alertname=\"{alert}\"}}'\n            value: 1\n");
        }
    }
    text
}

/// The dashboard's queries as recording rules, Grafana's variables replaced, for promtool to parse.
fn dashboard_as_rules(exprs: &[String]) -> String {
    let mut text = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, expr) in exprs.iter().enumerate() {
        let mut promql = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m");
        while let Some(at) = promql.find('$') {
            let len = promql[at + 1..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(promql.len() - at, |n| n + 1);
            promql.replace_range(at..at + len, ".*");
        }
        text += &format!("      - record: dashboard:query_{i}\n        expr: {}\n", Json::from(promql));
    }
    text
}

fn promtool(args: &[&str]) -> Output {
    Command::new("promtool").args(args).output().unwrap_or_else(|e| panic!("cannot run promtool {args:?}: {e}"))
}

fn assert_success(what: &str, output: &Output) {
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Whether `promtool` runs; if not, says on stderr (past the test harness's capture, so that the
/// skip is seen) that `what` is skipped.
fn have_promtool(what: &str) -> bool {
    match Command::new("promtool").arg("--version").output() {
        Ok(_) => true,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "ops_files: {what} skipped: promtool is not on PATH ({e}); install Debian's `prometheus` package to run them"
            );
            false
        }
    }
}

#[test]
fn promtool_checks_the_rules_and_the_dashboard_queries_and_each_alert_fires_on_its_fault() {
    if !have_promtool("promtool checks") {
        return;
    }
    let alerts = root().join(ALERTS).canonicalize().expect("the rule file's path");
    let alerts_arg = alerts.to_str().expect("a UTF-8 path");
    assert_success("promtool check rules", &promtool(&["check", "rules", alerts_arg]));

    let work = std::env::temp_dir().join(format!("outbox-ops-files-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("a temporary directory");
    let exprs: Vec<String> = panels(&dashboard()).into_iter().flat_map(|p| p.exprs).collect();
    let dashboard_rules = work.join("dashboard.yaml");
    std::fs::write(&dashboard_rules, dashboard_as_rules(&exprs)).expect("write the dashboard's queries");
    let checked = promtool(&["check", "rules", dashboard_rules.to_str().expect("a UTF-8 path")]);

    let mut failures = Vec::new();
    for (i, scenario) in SCENARIOS.iter().enumerate() {
        let test = work.join(format!("scenario-{i}.yaml"));
        std::fs::write(&test, rules_test(&alerts, scenario)).expect("write a rules test");
        let output = promtool(&["test", "rules", test.to_str().expect("a UTF-8 path")]);
        if !output.status.success() {
            failures.push(format!(
                "{}: expected {:?} firing at {EVAL_AT}:\n{}{}",
                scenario.fault,
                scenario.firing,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    assert_success("promtool check rules on the dashboard's queries", &checked);
    assert!(failures.is_empty(), "promtool test rules:\n{}", failures.join("\n"));

    let tested: BTreeSet<&str> = SCENARIOS.iter().flat_map(|s| s.firing.iter().copied()).collect();
    let untested: Vec<String> = rules().into_iter().map(|r| r.alert).filter(|a| !tested.contains(a.as_str())).collect();
    assert!(untested.is_empty(), "alerts with no scenario here: {untested:?}");
}

/// A `promtool test rules` file: a snapshot held from 0 on (its age gauge growing 60 s a minute)
/// and, at each of `at` (minutes), the `OutboxSnapshotHeld` alerts in each state.
fn snapshot_held_test(alerts: &Path, at: &[(u32, &str, bool)]) -> String {
    let mut text = format!(
        "rule_files:\n  - {}\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n",
        Json::from(alerts.display().to_string())
    );
    text += "      - series: 'outbox_oldest_snapshot_seconds{job=\"outbox-relay\", instance=\"relay-1:9187\"}'\n";
    text += "        values: '0+60x30'\n    promql_expr_test:\n";
    for (minute, state, present) in at {
        text += &format!(
            "      - expr: count(ALERTS{{alertname=\"OutboxSnapshotHeld\", alertstate=\"{state}\"}})\n        eval_time: {minute}m\n"
        );
        text += if *present { "        exp_samples:\n          - value: 1\n" } else { "        exp_samples: []\n" };
    }
    text
}

#[test]
fn the_snapshot_alert_fires_five_minutes_after_the_snapshot_is_ten_minutes_old() {
    if !have_promtool("the OutboxSnapshotHeld timing test") {
        return;
    }
    let alerts = root().join(ALERTS).canonicalize().expect("the rule file's path");
    // The gauge reads 60 s a minute: 600 at 10m (not above), 660 at 11m (pending), firing from 16m.
    let at = [
        (5, "pending", false),
        (5, "firing", false),
        (10, "pending", false),
        (11, "pending", true),
        (15, "firing", false),
        (16, "firing", true),
        (25, "firing", true),
    ];
    let work = std::env::temp_dir().join(format!("outbox-ops-files-snapshot-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("a temporary directory");
    let test = work.join("snapshot-held.yaml");
    std::fs::write(&test, snapshot_held_test(&alerts, &at)).expect("write the rules test");
    let output = promtool(&["test", "rules", test.to_str().expect("a UTF-8 path")]);
    let _ = std::fs::remove_dir_all(&work);
    assert_success("promtool test rules (OutboxSnapshotHeld: quiet at 300 s, firing 5 minutes after 600 s)", &output);
}
