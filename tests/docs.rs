//! The documentation against the repository and the program. Every relative link of the pages
//! (README.md, CONTRIBUTING.md, BENCHMARKS.md, docs/*.md) names a file of the repository, and
//! every `#anchor` a heading of the page it names (GitHub's slugs); every page of docs/ is in
//! the README's index. Every command a page shows in a `sh` block that runs nxcc (`nxcc ...`,
//! `target/release/nxcc ...`, `neuronx-cc ...`, also after `$ `, an `&&` or variables set before
//! it) is one nxcc accepts: its subcommand exists and its arguments parse as nxcc's command line
//! (`manual::command`, the completions' and manual pages' own) has them, and a compile's — also
//! those after `--` of `parallel-compile` and `cache explain` — are lowered into an `Invocation`
//! and planned, as a dry run plans them, with a static probe: nothing is read, run or served.
//! Every path of the repository a shown command, or a page's code, names exists.
//!
//! A synopsis line is read as the commands it stands for: `[--json]` as `--json`, `stats|verify`
//! as each of them, `...` as nothing, and the placeholders of [`PLACEHOLDERS`] as an example.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use nxcc::cli::Command;
use nxcc::plan::{Invocation, Refusal, StaticProbe};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The pages checked, relative to the root: the three at the root and every page of docs/.
fn pages() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = ["README.md", "CONTRIBUTING.md", "BENCHMARKS.md"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".md"))
        .map(|n| Path::new("docs").join(n))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

/// A Markdown page: its prose (the paragraphs outside code blocks, each with its first line
/// number) and its fenced code blocks.
struct Page {
    path: PathBuf,
    headings: Vec<String>,
    paragraphs: Vec<(usize, String)>,
    blocks: Vec<Block>,
}

/// A fenced code block: its info string (`sh`, `text`, ...) and its lines with their numbers.
struct Block {
    info: String,
    lines: Vec<(usize, String)>,
}

impl Page {
    fn read(path: &Path) -> Page {
        let text = std::fs::read_to_string(Path::new(ROOT).join(path))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Page::of(path, &text)
    }

    fn of(path: &Path, text: &str) -> Page {
        let mut page = Page {
            path: path.to_path_buf(),
            headings: Vec::new(),
            paragraphs: Vec::new(),
            blocks: Vec::new(),
        };
        let mut fence: Option<(String, Block)> = None;
        let mut paragraph: Option<(usize, String)> = None;
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let trimmed = line.trim_start();
            if let Some((marker, block)) = &mut fence {
                if trimmed.trim_end() == marker.as_str() {
                    let (_, block) = fence.take().unwrap();
                    page.blocks.push(block);
                } else {
                    block.lines.push((n, line.to_string()));
                }
                continue;
            }
            if let Some(marker) = fence_marker(trimmed) {
                page.paragraphs.extend(paragraph.take());
                let info = trimmed[marker.len()..].trim().to_string();
                let block = Block {
                    info,
                    lines: Vec::new(),
                };
                fence = Some((marker, block));
                continue;
            }
            if trimmed.is_empty() {
                page.paragraphs.extend(paragraph.take());
                continue;
            }
            if let Some(heading) = heading(line) {
                page.headings.push(heading);
            }
            match &mut paragraph {
                Some((_, p)) => {
                    p.push('\n');
                    p.push_str(line);
                }
                None => paragraph = Some((n, line.to_string())),
            }
        }
        assert!(
            fence.is_none(),
            "{}: a code block never closes",
            path.display()
        );
        page.paragraphs.extend(paragraph);
        page
    }

    /// The anchors of its headings, as GitHub makes them: a repeated one gets `-1`, `-2`, ...
    fn anchors(&self) -> BTreeSet<String> {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let mut out = BTreeSet::new();
        for h in &self.headings {
            let base = slug(h);
            let count = seen.entry(base.clone()).or_insert(0);
            out.insert(match *count {
                0 => base.clone(),
                n => format!("{base}-{n}"),
            });
            *count += 1;
        }
        out
    }

    /// The destinations of its links and images (code spans left out), with their line numbers.
    fn links(&self) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        for (first, p) in &self.paragraphs {
            let prose = without_code_spans(p);
            for (at, _) in prose.match_indices("](") {
                let line = first + prose[..at].matches('\n').count();
                out.push((line, destination(&prose[at + 2..])));
            }
        }
        out
    }
}

/// The opening of a fenced code block (```` ``` ```` or `~~~`, three or more), if `line` is one.
fn fence_marker(line: &str) -> Option<String> {
    for c in ['`', '~'] {
        let run = line.chars().take_while(|&x| x == c).count();
        if run >= 3 {
            return Some(c.to_string().repeat(run));
        }
    }
    None
}

/// The text of an ATX heading (`## Text`), if `line` is one.
fn heading(line: &str) -> Option<String> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[indent..];
    let level = rest.chars().take_while(|&c| c == '#').count();
    if indent > 3 || !(1..=6).contains(&level) {
        return None;
    }
    let text = &rest[level..];
    if !(text.is_empty() || text.starts_with(' ')) {
        return None;
    }
    Some(text.trim().trim_end_matches('#').trim().to_string())
}

/// GitHub's anchor of a heading: its text as rendered (a link's text, no markup), lower case,
/// without punctuation but `-` and `_`, each space a `-`.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[text](url)` renders as `text`.
    while let Some(open) = rest.find("](") {
        let close = rest[open..].find(')').map_or(rest.len(), |c| open + c + 1);
        text.push_str(&rest[..open]);
        rest = &rest[close..];
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The text without its code spans (each replaced by a space), as Markdown pairs backtick runs.
fn without_code_spans(text: &str) -> String {
    code_spans(text).0
}

/// The text without its code spans (each replaced by a space), and the spans.
fn code_spans(text: &str) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut spans = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let run = rest[start..].chars().take_while(|&c| c == '`').count();
        let after = &rest[start + run..];
        let ticks = "`".repeat(run);
        let bytes = after.as_bytes();
        let close = (0..bytes.len()).find(|&i| {
            bytes[i..].starts_with(ticks.as_bytes())
                && bytes.get(i + run) != Some(&b'`')
                && (i == 0 || bytes[i - 1] != b'`')
        });
        match close {
            // The span's line breaks are kept, so that line numbers stay right.
            Some(i) => {
                out.push(' ');
                out.push_str(&"\n".repeat(after[..i].matches('\n').count()));
                spans.push(after[..i].trim().to_string());
                rest = &after[i + run..];
            }
            None => {
                out.push_str(&ticks);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    (out, spans)
}

/// A link's destination, from just after its `](`: up to the `)` that closes it, without a
/// title.
fn destination(after: &str) -> String {
    let mut depth = 0usize;
    let mut end = after.len();
    for (i, c) in after.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => {
                end = i;
                break;
            }
            ')' => depth -= 1,
            _ => {}
        }
    }
    let dest = after[..end].trim();
    dest.split_whitespace().next().unwrap_or("").to_string()
}

/// Whether a destination names a scheme (`https:`, `mailto:`): not a file of the repository.
fn has_scheme(dest: &str) -> bool {
    let Some(colon) = dest.find(':') else {
        return false;
    };
    let scheme = &dest[..colon];
    scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
}

/// `a/b/../c` → `a/c`; `None` when it climbs out of the root.
fn normalise(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// What is wrong with the links of `page` (read in `world`, the pages by path), one line each.
fn broken_links(page: &Page, world: &dyn Fn(&Path) -> Option<Page>) -> Vec<String> {
    let mut out = Vec::new();
    let here = page.path.parent().unwrap_or(Path::new(""));
    for (line, dest) in page.links() {
        let at = format!("{}:{line}: ({dest})", page.path.display());
        if dest.is_empty() {
            out.push(format!("{at} a link without a destination"));
            continue;
        }
        if has_scheme(&dest) {
            continue;
        }
        let (file, anchor) = match dest.split_once('#') {
            Some((f, a)) => (f, Some(a)),
            None => (dest.as_str(), None),
        };
        let target = if file.is_empty() {
            Some(page.path.clone())
        } else {
            normalise(&here.join(file))
        };
        let Some(target) = target else {
            out.push(format!("{at} climbs out of the repository"));
            continue;
        };
        if target != page.path && !Path::new(ROOT).join(&target).exists() {
            out.push(format!("{at} {} does not exist", target.display()));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        let Some(linked) = world(&target) else {
            out.push(format!(
                "{at} an anchor into {}, not a page",
                target.display()
            ));
            continue;
        };
        if !linked.anchors().contains(anchor) {
            out.push(format!(
                "{at} {} has no heading whose anchor is #{anchor}",
                target.display()
            ));
        }
    }
    out
}

/// A page of the repository by its path, if it is a Markdown page.
fn page_at(path: &Path) -> Option<Page> {
    (path.extension().is_some_and(|e| e == "md") && Path::new(ROOT).join(path).is_file())
        .then(|| Page::read(path))
}

#[test]
fn every_link_of_the_documentation_names_a_file_and_every_anchor_a_heading() {
    let mut broken = Vec::new();
    let mut count = 0;
    for path in pages() {
        let page = Page::read(&path);
        count += page.links().len();
        broken.extend(broken_links(&page, &page_at));
    }
    assert!(count > 50, "only {count} links found: the reader is broken");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_of_docs_is_in_the_readmes_index() {
    let readme = Page::read(Path::new("README.md"));
    let linked: BTreeSet<String> = readme
        .links()
        .into_iter()
        .map(|(_, d)| d.split('#').next().unwrap_or("").to_string())
        .collect();
    let missing: Vec<String> = pages()
        .into_iter()
        .filter(|p| p.starts_with("docs"))
        .map(|p| p.display().to_string())
        .filter(|p| !linked.contains(p))
        .collect();
    assert!(
        missing.is_empty(),
        "pages the README does not link: {missing:?}"
    );
}

#[test]
fn anchors_are_githubs() {
    let page = Page::of(
        Path::new("t.md"),
        "# nxcc\n\n## The plan and `--dry-run`\n\n### Inside the framework's compile cache: `parallel-compile --neuron-cache`\n\n```sh\n# not a heading\n```\n\n## Usage\n\n## Usage\n\n#not a heading\n\n## A cache in S3: `--cache_dir s3://BUCKET/PREFIX`\n\n## Ünïcode — →\n",
    );
    let expected: BTreeSet<String> = [
        "nxcc",
        "the-plan-and---dry-run",
        "inside-the-frameworks-compile-cache-parallel-compile---neuron-cache",
        "usage",
        "usage-1",
        "a-cache-in-s3---cache_dir-s3bucketprefix",
        "ünïcode--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(page.anchors(), expected);
}

#[test]
fn a_link_to_a_missing_file_or_heading_is_found() {
    let page = Page::of(
        Path::new("docs/t.md"),
        "# T\n\n## Here\n\nSee [here](#here), [the cache](cache.md#the-key),\n[gone](gone.md), [no heading](#nowhere)\nand [up](../README.md#set-up), `[code](nowhere.md)`, [web](https://example.com/x).\n\n```sh\necho [x](gone-too.md)\n```\n\n[climb](../../x.md) ![img](timings.png) [dir](../tests/) [x](../README.md#no-such-part)\n",
    );
    let world = |p: &Path| {
        if p == Path::new("docs/t.md") {
            Some(Page::of(p, "# T\n\n## Here\n"))
        } else {
            page_at(p)
        }
    };
    let broken = broken_links(&page, &world);
    let found: Vec<&str> = broken
        .iter()
        .map(|b| b.split_once(": ").map_or("", |(_, rest)| rest))
        .collect();
    assert_eq!(
        found,
        [
            "(cache.md#the-key) docs/cache.md has no heading whose anchor is #the-key",
            "(gone.md) docs/gone.md does not exist",
            "(#nowhere) docs/t.md has no heading whose anchor is #nowhere",
            "(../../x.md) climbs out of the repository",
            "(../README.md#no-such-part) README.md has no heading whose anchor is #no-such-part",
        ],
        "{broken:#?}"
    );
    assert_eq!(broken[0].split(':').nth(1), Some("5"), "{broken:?}");
    assert_eq!(broken[3].split(':').nth(1), Some("13"), "{broken:?}");
}

/// Placeholders of synopsis lines, and the example each stands for.
const PLACEHOLDERS: [(&str, &str); 2] = [
    ("COMPILE-ARGS", "model.pb --target trn2"),
    ("KEY=VALUE...", "max_size=20G"),
];

/// The programs whose command lines are checked: nxcc under its names.
const PROGRAMS: [&str; 3] = ["nxcc", "target/release/nxcc", "neuronx-cc"];

/// Where the repository's files are: a word of a command that starts so names one.
const REPOSITORY_DIRS: [&str; 11] = [
    ".ci/",
    "bench/",
    "benches/",
    "build/",
    "crates/",
    "docs/",
    "examples/",
    "packaging/",
    "python/",
    "src/",
    "tests/",
];

/// The commands of a page's shell blocks: each logical line (continuations joined, `$ `
/// dropped) with its first line number.
fn shown_commands(page: &Page) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for block in &page.blocks {
        if !["sh", "bash", "shell", "console"].contains(&block.info.as_str()) {
            continue;
        }
        let mut pending: Option<(usize, String)> = None;
        for (n, line) in &block.lines {
            let (first, mut text) = pending.take().unwrap_or((*n, String::new()));
            let line = if text.is_empty() {
                line.strip_prefix("$ ").unwrap_or(line)
            } else {
                line.as_str()
            };
            text.push_str(line);
            match text.strip_suffix('\\') {
                Some(joined) => pending = Some((first, format!("{joined} "))),
                None => out.push((first, text)),
            }
        }
        out.extend(pending);
    }
    out
}

/// A shell line's simple commands, as words: quotes removed, a command substitution a word of
/// its own (`SUBST`), comments, redirections and their files dropped; split at `&&`, `||`, `;`,
/// `&` and a `|` that stands alone (one inside a word is a synopsis's alternatives).
fn simple_commands(line: &str) -> Vec<Vec<String>> {
    let mut commands = vec![Vec::new()];
    let mut word: Option<String> = None;
    let mut redirect = false;
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let end_word = |word: &mut Option<String>, commands: &mut Vec<Vec<String>>, r: &mut bool| {
        if let Some(w) = word.take() {
            if std::mem::take(r) {
                return;
            }
            commands.last_mut().unwrap().push(w);
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            ' ' | '\t' => end_word(&mut word, &mut commands, &mut redirect),
            '#' if word.is_none() => break,
            '\'' => {
                let close = chars[i + 1..].iter().position(|&x| x == '\'');
                let close = close.map_or(chars.len(), |p| i + 1 + p);
                let w = word.get_or_insert_with(String::new);
                w.extend(&chars[i + 1..close]);
                i = close;
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '$' && chars.get(i + 1) == Some(&'(') {
                        i = substitution_end(&chars, i);
                        w.push_str("SUBST");
                    } else {
                        w.push(chars[i]);
                    }
                    i += 1;
                }
            }
            '$' if next == Some('(') => {
                i = substitution_end(&chars, i);
                word.get_or_insert_with(String::new).push_str("SUBST");
            }
            '&' | ';' => {
                end_word(&mut word, &mut commands, &mut redirect);
                if c == '&' && next == Some('&') {
                    i += 1;
                }
                commands.push(Vec::new());
            }
            '|' if word.is_none() => {
                if next == Some('|') {
                    i += 1;
                }
                commands.push(Vec::new());
            }
            '>' | '<' => {
                // `2>` and `>>`: the descriptor's digits are no word.
                if word
                    .as_deref()
                    .is_some_and(|w| w.chars().all(|d| d.is_ascii_digit()))
                {
                    word = None;
                }
                end_word(&mut word, &mut commands, &mut redirect);
                if next == Some('>') || next == Some('&') {
                    i += 1;
                }
                redirect = true;
            }
            _ => word.get_or_insert_with(String::new).push(c),
        }
        i += 1;
    }
    end_word(&mut word, &mut commands, &mut redirect);
    commands.retain(|c| !c.is_empty());
    commands
}

/// The index of the `)` that closes the command substitution opening at `at` (`$(`).
fn substitution_end(chars: &[char], at: usize) -> usize {
    let mut depth = 0;
    for (i, &c) in chars.iter().enumerate().skip(at + 1) {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    chars.len()
}

/// The argument lists a synopsis stands for: brackets dropped, each alternative of `a|b` taken,
/// `...` dropped, placeholders replaced by their example.
fn expansions(words: &[String]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = vec![Vec::new()];
    for w in words {
        let w = w.trim_start_matches('[').trim_end_matches(']');
        if w.is_empty() || w == "..." {
            continue;
        }
        if let Some((_, example)) = PLACEHOLDERS.iter().find(|(p, _)| *p == w) {
            let example: Vec<String> = example.split(' ').map(String::from).collect();
            out.iter_mut()
                .for_each(|o| o.extend(example.iter().cloned()));
            continue;
        }
        let choices: Vec<&str> = if w.len() > 2 && w.contains('|') && !w.contains("://") {
            w.split('|').collect()
        } else {
            vec![w]
        };
        out = out
            .into_iter()
            .flat_map(|o| {
                choices.iter().map(move |c| {
                    let mut o = o.clone();
                    o.push(c.to_string());
                    o
                })
            })
            .collect();
    }
    out
}

/// Whether nxcc accepts `args` (its command line without the program): `Err` is what it says.
fn accepts(args: &[String]) -> Result<(), String> {
    match nxcc::cli::parse("nxcc", args) {
        Err(e) => Err(e.render()),
        Ok(Command::Help(_) | Command::Version { .. }) => Ok(()),
        Ok(Command::Compile(c)) => planned(Invocation::from_args(&c, &probe())),
        Ok(Command::Other { name, args }) => subcommand(&name, &args),
    }
}

/// What the plan sees: a launch directory, every model there, no toolchain found by itself.
fn probe() -> StaticProbe {
    StaticProbe::new("/launch")
}

fn planned(invocation: Result<Invocation, Refusal>) -> Result<(), String> {
    match invocation {
        Ok(_) | Err(Refusal::Help(_) | Refusal::Version) => Ok(()),
        Err(refusal) => Err(refusal.render()),
    }
}

/// Whether nxcc's subcommand `name` takes `args`, as nxcc's whole command line (the one the
/// manual pages and the completions are made from) has it; the compile arguments after `--` of
/// `parallel-compile` (every input's) and `cache explain` (with their model) are planned too.
fn subcommand(name: &str, args: &[String]) -> Result<(), String> {
    let mut nxcc = nxcc::manual::command("nxcc");
    nxcc.build();
    let Some(command) = nxcc.find_subcommand(name) else {
        return Err(format!("nxcc {name}: not a command of nxcc's command line"));
    };
    let words = std::iter::once(format!("nxcc {name}")).chain(args.iter().cloned());
    if let Err(e) = command.clone().try_get_matches_from(words) {
        if e.kind() != clap::error::ErrorKind::DisplayHelp {
            return Err(e.render().to_string());
        }
    }
    let Some(tail) = args
        .iter()
        .position(|a| a == "--")
        .map(|at| &args[at + 1..])
    else {
        return Ok(());
    };
    let mut compile = vec!["compile".to_string()];
    match name {
        "parallel-compile" => compile.push("model.pb".into()),
        "cache" => {}
        _ => return Ok(()),
    }
    compile.extend(tail.iter().cloned());
    match nxcc::cli::parse("nxcc", &compile) {
        Ok(Command::Compile(c)) => planned(Invocation::from_args(&c, &probe())),
        Ok(_) => Ok(()),
        Err(e) => Err(e.render()),
    }
}

/// The files and directories of the repository a page names in its code spans (`src/shim/`,
/// `tests/docs.rs`; a `:line` after one left out), with their line numbers; a span with a
/// pattern or a placeholder in it (`*`, `<`, `{`, `$`, `...`) names none.
fn named_paths(page: &Page) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (first, p) in &page.paragraphs {
        for span in code_spans(p).1 {
            let path = span.split(':').next().unwrap_or("");
            if REPOSITORY_DIRS.iter().any(|d| path.starts_with(d))
                && !path.contains(char::is_whitespace)
                && !path.contains(['*', '<', '{', '$'])
                && !path.contains("...")
            {
                let line = first + p[..p.find(&span).unwrap_or(0)].matches('\n').count();
                out.push((line, path.to_string()));
            }
        }
    }
    out
}

#[test]
fn every_file_of_the_repository_a_page_names_exists() {
    let mut missing = Vec::new();
    let mut count = 0;
    for path in pages() {
        for (line, named) in named_paths(&Page::read(&path)) {
            count += 1;
            if !Path::new(ROOT).join(&named).exists() {
                missing.push(format!("{}:{line}: {named}", path.display()));
            }
        }
    }
    assert!(count > 50, "only {count} paths found: the reader is broken");
    assert!(
        missing.is_empty(),
        "files the documentation names that are not in the repository:\n{}",
        missing.join("\n")
    );
}

/// What is wrong with a shown command line, one message per simple command that fails.
fn check_line(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for words in simple_commands(line) {
        for w in &words {
            let path = w.trim_end_matches('/');
            if REPOSITORY_DIRS.iter().any(|d| w.starts_with(d))
                && !path.contains(['*', '<', '$'])
                && !Path::new(ROOT).join(path).exists()
            {
                out.push(format!("{w}: no such file in the repository"));
            }
        }
        let start = words
            .iter()
            .position(|w| !is_assignment(w))
            .unwrap_or(words.len());
        let Some(program) = words.get(start) else {
            continue;
        };
        if !PROGRAMS.contains(&program.as_str()) {
            continue;
        }
        for args in expansions(&words[start + 1..]) {
            if let Err(e) = accepts(&args) {
                out.push(format!("`{} {}`: {}", program, args.join(" "), gist(&e)));
            }
        }
    }
    out
}

/// The lines of a refusal that say what is wrong (not the usage that follows or precedes them).
fn gist(refusal: &str) -> String {
    let lines: Vec<&str> = refusal.lines().filter(|l| !l.trim().is_empty()).collect();
    let said: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains("error:") || l.contains("[NCC_") || l.contains("ERROR"))
        .collect();
    match said.is_empty() {
        true => lines.last().copied().unwrap_or("").to_string(),
        false => said.join(" / "),
    }
}

/// `NAME=value` before a command.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

#[test]
fn every_command_the_documentation_shows_is_one_nxcc_accepts() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for path in pages() {
        let page = Page::read(&path);
        for (line, command) in shown_commands(&page) {
            let runs_nxcc = simple_commands(&command).iter().any(|words| {
                let start = words.iter().position(|w| !is_assignment(w));
                start.is_some_and(|s| PROGRAMS.contains(&words[s].as_str()))
            });
            checked += usize::from(runs_nxcc);
            for e in check_line(&command) {
                wrong.push(format!("{}:{line}: {e}", path.display()));
            }
        }
    }
    assert!(
        checked > 40,
        "only {checked} commands found: the reader is broken"
    );
    assert!(
        wrong.is_empty(),
        "commands nxcc does not accept as shown:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn shell_lines_are_read_as_the_commands_they_run() {
    let words = |line: &str| simple_commands(line);
    let w = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        words("cargo build --release && target/release/nxcc neff-info --verify a.neff"),
        vec![
            w(&["cargo", "build", "--release"]),
            w(&["target/release/nxcc", "neff-info", "--verify", "a.neff"])
        ]
    );
    assert_eq!(
        words(
            r#"nxcc shim install /opt/s --compiler "$(command -v neuronx-cc)" && export PATH=/opt/s:$PATH"#
        ),
        vec![
            w(&["nxcc", "shim", "install", "/opt/s", "--compiler", "SUBST"]),
            w(&["export", "PATH=/opt/s:$PATH"])
        ]
    );
    assert_eq!(
        words("nxcc neff-info --extract a/def.json m.neff > def.json 2>/dev/null # a comment"),
        vec![w(&[
            "nxcc",
            "neff-info",
            "--extract",
            "a/def.json",
            "m.neff"
        ])]
    );
    assert_eq!(
        words("nxcc daemon --pid-file 'a b' & cd x; nxcc hlo-info m | head"),
        vec![
            w(&["nxcc", "daemon", "--pid-file", "a b"]),
            w(&["cd", "x"]),
            w(&["nxcc", "hlo-info", "m"]),
            w(&["head"])
        ]
    );
    assert_eq!(
        expansions(&w(&[
            "cache",
            "stats|verify",
            "[--json]",
            "...",
            "--",
            "COMPILE-ARGS"
        ])),
        vec![
            w(&["cache", "stats", "--json", "--", "model.pb", "--target", "trn2"]),
            w(&["cache", "verify", "--json", "--", "model.pb", "--target", "trn2"])
        ]
    );
    let page = Page::of(
        Path::new("t.md"),
        "```sh\n$ nxcc compile m.pb \\\n    --target trn2\nls\n```\n\n```text\nnxcc nothing\n```\n",
    );
    assert_eq!(
        shown_commands(&page),
        vec![
            (2, "nxcc compile m.pb      --target trn2".to_string()),
            (4, "ls".to_string())
        ]
    );
}

#[test]
fn a_command_nxcc_refuses_is_found() {
    for good in [
        "nxcc compile model.pb --target trn2 --output model.neff --dry-run",
        "nxcc --target=trn1 compile --framework XLA model.pb --verbose=35 --dry-run=json",
        "nxcc compile --help",
        "nxcc cache stats [--cache_dir DIR] [--json]",
        "nxcc parallel-compile graphs/ --memory-budget auto -- --target trn2 -O1",
        "nxcc cache explain -- model.pb --target trn2",
        "X=1 nxcc daemon stop",
        "nxcc completions bash && nxcc man compile",
        "ls examples/models/ tests/data/flags.tsv",
    ] {
        assert_eq!(check_line(good), Vec::<String>::new(), "{good}");
    }
    for bad in [
        "nxcc compile model.pb --target trn2 --no-such-flag",
        "nxcc compile model.pb --target trn9",
        "nxcc no-such-command",
        "nxcc cache stats|no-such-action --json",
        "nxcc cache stats --no-such-flag",
        "nxcc parallel-compile graphs/ -- --target trn2 --no-such-flag",
        "nxcc cache explain -- model.pb --target trn2 --no-such-flag",
        "nxcc hlo-info --jsn m.pb --no-such-flag",
        "nxcc daemon --max-concurrent 0",
        "nxcc completions tcsh",
        "A=b target/release/nxcc neff-info --no-such-flag m.neff",
        "true && neuronx-cc compile m.pb --target trn2 --no-such-flag",
        "python3 bench/no_such_benchmark.py",
    ] {
        assert_eq!(check_line(bad).len(), 1, "{bad}: {:?}", check_line(bad));
    }
}
