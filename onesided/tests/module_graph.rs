//! The crate's modules depend on each other without cycles.
//!
//! Every source file is a module; a path to another module (`crate::a::b::Item`,
//! `super::x`, `self::child`, or `child::Item` for a declared `mod child`) in its code, not
//! in comments or unit tests, is a dependency on the deepest module the path names; a path
//! through a re-export (`pub use child::Item` in a parent) is a dependency on the module
//! that defines the item, and a module depends on what it re-exports only where its own code
//! uses the name. The crate root, which only declares and re-exports, is never a
//! dependency. The test fails with the cycle it found.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`win::create`; "" for the crate root) of every source file.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("source directory") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    files
        .into_iter()
        .map(|path| {
            let rel = path
                .strip_prefix(src)
                .expect("inside src")
                .with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            (parts.join("::"), path)
        })
        .collect()
}

/// The code of a file without comments, string literals, re-exports and
/// `#[cfg(test)] mod tests`.
fn code_of(text: &str) -> String {
    let text = &text[..unit_tests_start(text)];
    let text = without_comments(text);
    split_reexports(&text).0
}

/// Where a file's unit tests start (`#[cfg(test)]` or `#[cfg(all(test, …))]` before
/// `mod tests`), or its length.
fn unit_tests_start(text: &str) -> usize {
    ["#[cfg(test)]\nmod tests", "#[cfg(all(test, "]
        .iter()
        .filter_map(|m| text.find(m))
        .filter(|&i| {
            text[i..]
                .lines()
                .nth(1)
                .is_some_and(|l| l.starts_with("mod tests"))
        })
        .min()
        .unwrap_or(text.len())
}

/// The text without comments and string literals.
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if !escaped && c == '"' {
                        break;
                    }
                    escaped = !escaped && c == '\\';
                }
                out.push_str("\"\"");
            }
            _ => out.push(c),
        }
    }
    out
}

/// `text` without its `pub use ...;` and `pub(crate) use ...;` statements, and those
/// statements (each on one line).
fn split_reexports(text: &str) -> (String, Vec<String>) {
    let mut code = String::with_capacity(text.len());
    let mut reexports = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let t = line.trim();
        if current.is_none() && (t.starts_with("pub use ") || t.starts_with("pub(crate) use ")) {
            current = Some(String::new());
        }
        match current.as_mut() {
            Some(statement) => {
                statement.push_str(t);
                statement.push(' ');
                if t.ends_with(';') {
                    reexports.extend(current.take());
                }
                code.push('\n');
            }
            None => {
                code.push_str(line);
                code.push('\n');
            }
        }
    }
    (code, reexports)
}

/// The names a `pub use` statement exports, each with the path it comes from.
fn exported_names(statement: &str) -> Vec<(String, Vec<String>)> {
    let body = statement
        .trim()
        .trim_start_matches("pub(crate) use ")
        .trim_start_matches("pub use ")
        .trim_end_matches(';')
        .trim();
    let (prefix, names): (&str, Vec<&str>) = match body.split_once('{') {
        Some((prefix, rest)) => (prefix, rest.trim_end_matches('}').split(',').collect()),
        None => match body.rsplit_once("::") {
            Some((prefix, name)) => (prefix, vec![name]),
            None => ("", vec![body]),
        },
    };
    let prefix: Vec<String> = prefix
        .split("::")
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    names
        .into_iter()
        .map(str::trim)
        .filter(|n| !n.is_empty() && *n != "self")
        .map(|n| {
            let (orig, alias) = n.split_once(" as ").unwrap_or((n, n));
            let mut path = prefix.clone();
            path.push(orig.trim().to_owned());
            (alias.trim().to_owned(), path)
        })
        .collect()
}

/// `code` with every use group written out: `a::{b, c::{d as e, self}, f::*}` becomes
/// `a::b a::c::d a::c a::f`, so that a module imported in a group (`use
/// crate::transport::{net, ofi::Remote}`) is seen as the path it is.
fn expand_groups(code: &str) -> String {
    let Some(open) = code.find("::{") else {
        return code.to_owned();
    };
    let is_path = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let start = code[..open]
        .char_indices()
        .rev()
        .find(|&(_, c)| !is_path(c))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let prefix = &code[start..open];
    let inner_start = open + 3;
    let mut depth = 1;
    let mut end = code.len();
    for (i, c) in code[inner_start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    end = inner_start + i;
                    break;
                }
            }
            _ => {}
        }
    }
    let inner = &code[inner_start..end];
    let mut items = Vec::new();
    let (mut depth, mut from) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[from..]);
    let written: Vec<String> = items
        .iter()
        .map(|item| item.trim())
        .filter(|item| !item.is_empty())
        .map(|item| {
            let item = match item.contains('{') {
                true => item,
                false => item.split(" as ").next().unwrap_or(item).trim(),
            };
            match item {
                "self" | "*" => prefix.to_owned(),
                _ => expand_groups(&format!("{prefix}::{item}")),
            }
        })
        .collect();
    let rest = code.get(end + 1..).unwrap_or("");
    format!(
        "{}{} {}",
        &code[..start],
        written.join(" "),
        expand_groups(rest)
    )
}

/// Every `a::b::c` path in `code` (use groups written out), as its segments, with the
/// character before it.
fn paths(code: &str) -> Vec<(Option<char>, Vec<String>)> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let bytes: Vec<char> = expand_groups(code).chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !is_ident(bytes[i]) || (i > 0 && is_ident(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let before = i.checked_sub(1).map(|j| bytes[j]);
        let mut segs = Vec::new();
        let mut j = i;
        loop {
            let start = j;
            while j < bytes.len() && is_ident(bytes[j]) {
                j += 1;
            }
            segs.push(bytes[start..j].iter().collect::<String>());
            if j + 2 < bytes.len()
                && bytes[j] == ':'
                && bytes[j + 1] == ':'
                && is_ident(bytes[j + 2])
            {
                j += 2;
            } else {
                break;
            }
        }
        if segs.len() > 1 {
            out.push((before, segs));
        }
        i = j.max(i + 1);
    }
    out
}

/// The deepest module named by `base` followed by a prefix of `segs`, with the segment
/// after that prefix (the item named in the module, if any).
fn resolve(
    mods: &BTreeMap<String, PathBuf>,
    base: &[String],
    segs: &[String],
) -> Option<(String, Option<String>)> {
    (0..=segs.len()).rev().find_map(|k| {
        let name: Vec<&str> = base.iter().chain(&segs[..k]).map(String::as_str).collect();
        let name = name.join("::");
        mods.contains_key(&name)
            .then(|| (name, segs.get(k).cloned()))
    })
}

/// What one source file says about modules.
struct Source {
    me: Vec<String>,
    code: String,
    children: BTreeSet<String>,
    reexports: Vec<String>,
}

impl Source {
    fn read(module: &str, file: &Path) -> Source {
        let text = std::fs::read_to_string(file).expect("source file");
        let text = &text[..unit_tests_start(&text)];
        let (code, reexports) = split_reexports(&without_comments(text));
        let children = code
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let l = l
                    .strip_prefix("pub(crate) ")
                    .or(l.strip_prefix("pub "))
                    .unwrap_or(l);
                l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
            })
            .collect();
        Source {
            me: module
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            code,
            children,
            reexports,
        }
    }

    /// The module a path written in this file names (before re-exports are followed), and
    /// the item it names there.
    fn target(
        &self,
        mods: &BTreeMap<String, PathBuf>,
        segs: &[String],
    ) -> Option<(String, Option<String>)> {
        let parent = &self.me[..self.me.len().saturating_sub(1)];
        match segs[0].as_str() {
            "crate" => resolve(mods, &[], &segs[1..]),
            "super" => resolve(mods, parent, &segs[1..]),
            "self" => resolve(mods, &self.me, &segs[1..]),
            child if self.children.contains(child) => resolve(mods, &self.me, segs),
            _ => None,
        }
    }
}

fn dependencies(mods: &BTreeMap<String, PathBuf>) -> BTreeMap<String, BTreeSet<String>> {
    let sources: BTreeMap<&String, Source> =
        mods.iter().map(|(m, f)| (m, Source::read(m, f))).collect();
    // (module, exported name) -> module defining it.
    let mut exports: BTreeMap<(String, String), String> = BTreeMap::new();
    for (module, src) in &sources {
        for statement in &src.reexports {
            for (name, path) in exported_names(statement) {
                if let Some((t, _)) = src.target(mods, &path) {
                    exports.insert(((*module).clone(), name), t);
                }
            }
        }
    }
    // Follows re-exports: `m::Name` where `m` re-exports `Name` names the defining module.
    let through = |(mut t, item): (String, Option<String>)| -> String {
        if let Some(name) = item {
            for _ in 0..8 {
                match exports.get(&(t.clone(), name.clone())) {
                    Some(next) if *next != t => t = next.clone(),
                    _ => break,
                }
            }
        }
        t
    };
    let mut graph = BTreeMap::new();
    for (module, src) in &sources {
        let mut deps = BTreeSet::new();
        for (before, segs) in paths(&src.code) {
            if before == Some(':') {
                continue; // the tail of a longer path
            }
            if let Some(found) = src.target(mods, &segs) {
                deps.insert(through(found));
            }
        }
        // Names this module re-exports and also uses itself.
        for statement in &src.reexports {
            for (name, path) in exported_names(statement) {
                let used = src
                    .code
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .any(|word| word == name);
                if let (true, Some(found)) = (used, src.target(mods, &path)) {
                    deps.insert(through(found));
                }
            }
        }
        deps.retain(|t| t != *module && !t.is_empty());
        graph.insert((*module).clone(), deps);
    }
    graph
}

/// A cycle of `graph`, if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(node.to_owned(), Mark::Open);
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            match marks.get(next).copied().unwrap_or(Mark::New) {
                Mark::Open => {
                    let from = stack.iter().position(|n| n == next).expect("on stack");
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(c) = visit(next, graph, marks, stack) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        marks.insert(node.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if marks.get(node).copied().unwrap_or(Mark::New) == Mark::New {
            if let Some(c) = visit(node, graph, &mut marks, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn module_imports_have_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    assert!(mods.contains_key("win::create"), "found {:?}", mods.keys());
    let graph = dependencies(&mods);
    if let Some(cycle) = find_cycle(&graph) {
        panic!("module cycle: {}", cycle.join(" -> "));
    }
}

/// The crate's top-level modules (folders and single files) from the bottom layer up: a
/// module may use the modules of its layer's left, never one to its right. A transport or a
/// binding goes in below what uses it (see the module map in docs/architecture.md).
const LAYERS: [&str; 27] = [
    "error",
    "layout",
    "diag",
    "group",
    "attention",
    "pending",
    "backoff",
    "spin",
    "elements",
    "ops",
    "plain_acc",
    "plane",
    "shm",
    "transport",
    "bootstrap",
    "progress",
    "memory",
    "win",
    "net",
    "universe",
    "request",
    "sync",
    "rma",
    "typed",
    "coll",
    "launch",
    "testing",
];

/// Every top-level module is in one layer, and no module uses a higher layer (the last
/// two such uses — a wait's poke of the progress registry, the window core's epoch record
/// — went by moving the registry and the record down).
#[test]
fn folders_are_layered() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    let graph = dependencies(&mods);
    let top = |m: &str| m.split("::").next().unwrap_or("").to_owned();
    let layer = |m: &str| LAYERS.iter().position(|l| *l == top(m));
    for m in mods.keys().filter(|m| !m.is_empty()) {
        assert!(layer(m).is_some(), "module {m} is in no layer of LAYERS");
    }
    let mut upward = BTreeSet::new();
    for (m, deps) in &graph {
        for d in deps {
            if let (Some(from), Some(to)) = (layer(m), layer(d)) {
                if to > from {
                    upward.insert((m.clone(), d.clone()));
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "modules using a higher layer: {upward:?}"
    );
}

/// The checker itself finds what it must find.
#[test]
fn the_checker_sees_paths_and_cycles() {
    let code = code_of(
        "use crate::a::b; // crate::c::d\npub use x::{\n  Y,\n};\nlet s = \"crate::e::f\"; super::g::h();",
    );
    let found: Vec<Vec<String>> = paths(&code).into_iter().map(|(_, p)| p).collect();
    assert_eq!(found.len(), 2, "{found:?}");
    let grouped = paths("use crate::t::{net, ofi::{Remote as R, self}, w::*};\nx::y();");
    let grouped: Vec<String> = grouped.into_iter().map(|(_, p)| p.join("::")).collect();
    assert_eq!(
        grouped,
        [
            "crate::t::net",
            "crate::t::ofi::Remote",
            "crate::t::ofi",
            "crate::t::w",
            "x::y"
        ],
        "use groups written out"
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_owned(), BTreeSet::from(["b".to_owned()])),
        ("b".to_owned(), BTreeSet::from(["c".to_owned()])),
        ("c".to_owned(), BTreeSet::from(["a".to_owned()])),
    ]
    .into();
    assert_eq!(find_cycle(&graph).map(|c| c.len()), Some(4));
}

/// The modules of the networks' implementations: libfabric (`ofi`), our messages over TCP
/// (`wire`), the libfabric endpoint (`net`) and its progress thread (`nic_progress`), and
/// the socket network (`socket`). The rest of the library reaches the network through the
/// transport interface only (`transport::network`; docs/architecture.md, "The network
/// seam").
const NETWORK_IMPLEMENTATION: [&str; 5] = [
    "transport::ofi",
    "transport::wire",
    "transport::net",
    "transport::nic_progress",
    "transport::socket",
];

/// Files outside `transport/` with `feature = "net"` (a build with a network, whichever
/// it is): the public network API (`onesided::network()`, `NetworkEndpoint`,
/// `testing::network_operations_in_flight`), the unit tests of the network protocols
/// (`net::plane`, `net::atomics`: every network of the build, through
/// `transport::network::test_endpoint`) and what only they use, and services that only a
/// network uses, which a build without one allows to stay unused (diag's job checks,
/// backoff's network pace, attention's sleeper and its unserved flag). `feature = "ofi"`
/// appears in none: libfabric is named in `transport/` alone. The counts only fall.
const NET_GATES: [(&str, usize); 8] = [
    ("attention.rs", 2),
    ("backoff.rs", 2),
    ("diag.rs", 4),
    ("lib.rs", 2),
    ("ops.rs", 1),
    ("net/atomics.rs", 3),
    ("net/plane.rs", 1),
    ("testing.rs", 4),
];

/// Outside `transport/`, no module names the network's implementation (paths through
/// re-exports, use groups and renames resolved to the module that defines the item) or the
/// request ring's kinds, and
/// the features are confined: `ofi` to `transport/`, `net` to the files of [`NET_GATES`].
#[test]
fn the_network_stays_behind_its_seam() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mods = modules(&src);
    let graph = dependencies(&mods);
    let outside = |m: &str| m != "transport" && !m.starts_with("transport::");
    let direct: BTreeSet<String> = graph
        .iter()
        .filter(|(m, deps)| {
            outside(m)
                && deps
                    .iter()
                    .any(|d| NETWORK_IMPLEMENTATION.contains(&d.as_str()))
        })
        .map(|(m, _)| m.clone())
        .collect();
    assert!(
        direct.is_empty(),
        "modules outside transport/ that use the network's implementation instead of \
         transport::network: {direct:?}"
    );
    // The request rings' requests are built through their constructors (what an operation
    // is), never from the ring's request kinds.
    let mut kinds_named = BTreeSet::new();
    for (m, file) in mods.iter().filter(|(m, _)| outside(m)) {
        let src = Source::read(m, file);
        for (_, segs) in paths(&src.code) {
            if let Some((t, Some(item))) = src.target(&mods, &segs) {
                if t == "transport::ring" && item == "Kind" {
                    kinds_named.insert(m.clone());
                }
            }
        }
    }
    assert!(
        kinds_named.is_empty(),
        "modules outside transport/ that name the request ring's kinds: {kinds_named:?}"
    );
    let mut gates = BTreeMap::new();
    for (m, file) in &mods {
        if !outside(m) {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("source file");
        let rel = file.strip_prefix(&src).expect("inside src");
        let rel = rel.to_string_lossy().into_owned();
        // Unit tests count too: a gate there is a gate.
        for feature in ["ofi", "net"] {
            let n = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .map(|l| l.matches(&format!("feature = \"{feature}\"")).count())
                .sum::<usize>();
            if n > 0 {
                gates.insert((feature, rel.clone()), n);
            }
        }
    }
    let listed: BTreeMap<(&str, String), usize> = NET_GATES
        .iter()
        .map(|(f, n)| (("net", (*f).to_owned()), *n))
        .collect();
    assert_eq!(
        gates, listed,
        "network features outside transport/ (left) against NET_GATES (right; no `ofi`)"
    );
}
