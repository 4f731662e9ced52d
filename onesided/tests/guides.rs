//! The guides in `docs/guide-*.md` (and the README's first program) quote the example
//! programs they walk through: every
//! ```rust block of a guide must be a run of consecutive lines of its example, byte for
//! byte, so that what a reader copies is what `scripts/tour.sh` runs and checks.

use std::path::{Path, PathBuf};

fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs")
}

/// The guide's example: the one `onesided/examples/<name>.rs` it links to.
fn example_of(guide: &str) -> String {
    let marker = "(../onesided/examples/";
    let at = guide
        .find(marker)
        .expect("a guide links its example program")
        + marker.len();
    let name = &guide[at..at + guide[at..].find(')').expect("link end")];
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The ```rust blocks of a markdown text.
fn rust_blocks(text: &str) -> Vec<Vec<&str>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in text.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```rust") => current = Some(Vec::new()),
            (Some(_), "```") => blocks.push(current.take().unwrap()),
            (Some(block), _) => block.push(line),
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "an unclosed code block");
    blocks
}

#[test]
fn every_guide_quotes_its_example_exactly() {
    let mut guides: Vec<PathBuf> = std::fs::read_dir(docs())
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("guide-") && n.ends_with(".md"))
        })
        .collect();
    guides.sort();
    assert!(
        guides.len() >= 3,
        "one guide per seed extension: {guides:?}"
    );
    for path in guides {
        let guide = std::fs::read_to_string(&path).expect("guide");
        let example = example_of(&guide);
        let lines: Vec<&str> = example.lines().collect();
        let blocks = rust_blocks(&guide);
        assert!(
            !blocks.is_empty(),
            "{}: no code from its example",
            path.display()
        );
        for block in blocks {
            assert!(
                lines.windows(block.len()).any(|w| w == block.as_slice()),
                "{}: this block is not in its example:\n{}",
                path.display(),
                block.join("\n")
            );
        }
    }
}

#[test]
fn the_block_reader_finds_blocks_and_only_rust_ones() {
    let text = "a\n```rust\nx\ny\n```\n```text\nz\n```\n```rust\nw\n```\n";
    assert_eq!(rust_blocks(text), vec![vec!["x", "y"], vec!["w"]]);
}

#[test]
fn the_readme_program_is_examples_first() {
    let readme = std::fs::read_to_string(docs().join("../README.md")).expect("README.md");
    let program = rust_blocks(&readme)
        .into_iter()
        .next()
        .expect("the README shows a first program");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/first.rs");
    let example = std::fs::read_to_string(&path).expect("examples/first.rs");
    let lines: Vec<&str> = example.lines().collect();
    assert!(
        lines
            .windows(program.len())
            .any(|w| w == program.as_slice()),
        "README's first program differs from examples/first.rs"
    );
}

/// The layer drawing of docs/architecture.md ("## Layers"): the module names that start
/// its lines (two spaces in; several on a line joined by " · "), top down.
fn drawn_layers(architecture: &str) -> Vec<String> {
    let section = &architecture[architecture.find("## Layers").expect("a Layers section")..];
    let block = &section[section.find("```text").expect("a drawing") + 7..];
    let block = &block[..block.find("```").expect("the drawing's end")];
    let mut names = Vec::new();
    for line in block.lines() {
        let Some(rest) = line.strip_prefix("  ") else {
            continue;
        };
        if rest.starts_with(' ') || rest.is_empty() {
            continue;
        }
        let head = rest.split("  ").next().unwrap_or("");
        let words: Vec<String> = head
            .split(" · ")
            .map(|w| w.trim().trim_end_matches(".rs").to_owned())
            .collect();
        if words
            .iter()
            .all(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        {
            names.extend(words);
        }
    }
    names
}

/// `LAYERS` as tests/module_graph.rs lists it, bottom up.
fn listed_layers() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/module_graph.rs");
    let text = std::fs::read_to_string(path).expect("module_graph.rs");
    let list = &text[text.find("const LAYERS").expect("LAYERS")..];
    let list = &list[list.find("= [").expect("its list") + 3..list.find("];").expect("end")];
    list.split(',')
        .map(|s| s.trim().trim_matches('"').to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The drawing of docs/architecture.md shows the layers in the order the module graph
/// test enforces (top down; `launch` and `testing`, beside the applications, are not
/// drawn).
#[test]
fn the_layer_drawing_is_the_module_graphs_order() {
    let text = std::fs::read_to_string(docs().join("architecture.md")).expect("architecture.md");
    let drawn = drawn_layers(&text);
    let mut listed = listed_layers();
    assert!(listed.len() > 20, "LAYERS read: {listed:?}");
    listed.retain(|l| l != "launch" && l != "testing");
    listed.reverse();
    assert_eq!(drawn, listed, "the drawing (left), LAYERS top down (right)");
}
