//! The checker: loads a script and its imports, declares every global, then
//! resolves each body into a `Program` while collecting every error it finds
//! (unknown names, wrong arity, unknown keyword arguments, unknown config
//! fields, members referenced but never declared, unknown types, duplicates).

use std::collections::HashMap;

use crate::ast;
use crate::diagnostic::{Diagnostic, SourceId, Sources};
use crate::parser;
use crate::program::*;

mod calls;
mod configs;
mod declare;
mod expr;
mod resolve;

/// Finds the text of an imported file: `import nn` asks for `"nn"`.
pub trait Resolver {
    /// Returns a display name (a path) and the text.
    fn resolve(&self, name: &str) -> Option<(String, String)>;
}

/// Resolves nothing: scripts without imports.
pub struct NoImports;

impl Resolver for NoImports {
    fn resolve(&self, _: &str) -> Option<(String, String)> {
        None
    }
}

/// Parses and checks `text` (named `name`) with its imports. The program is
/// usable only when the diagnostics are empty.
pub fn check(name: &str, text: &str, resolver: &dyn Resolver) -> (Program, Vec<Diagnostic>) {
    let mut c = Checker::default();
    c.load(name, text, resolver);
    c.declare();
    c.resolve_all();
    let prog = Program {
        sources: std::mem::take(&mut c.sources),
        syms: std::mem::take(&mut c.syms),
        configs: std::mem::take(&mut c.configs),
        modules: std::mem::take(&mut c.modules),
        fns: std::mem::take(&mut c.fns),
        globals: std::mem::take(&mut c.globals),
        main: 0,
    };
    (prog, c.diags)
}

/// What the checker knows statically about a value.
#[derive(Clone, Debug, PartialEq)]
enum SType {
    Unknown,
    Config(usize),
    Module(usize),
    ModuleList(usize),
    /// A member namespace node of a module type.
    Ns(usize, usize),
    Namespace(SourceId),
}

#[derive(Clone, Copy, PartialEq)]
enum ScopeKind {
    Config(usize, usize),
    Ctor(usize),
    Fn(Option<usize>),
}

struct Scope {
    file: SourceId,
    kind: ScopeKind,
    locals: Vec<(String, usize, SType)>,
    frame: usize,
}

impl Scope {
    fn new(file: SourceId, kind: ScopeKind) -> Scope {
        Scope {
            file,
            kind,
            locals: vec![],
            frame: 0,
        }
    }

    fn bind(&mut self, name: &str, ty: SType) -> usize {
        let slot = self.frame;
        self.frame += 1;
        self.locals.push((name.to_string(), slot, ty));
        slot
    }

    fn lookup(&self, name: &str) -> Option<(usize, SType)> {
        self.locals
            .iter()
            .rev()
            .find(|(n, _, _)| n == name)
            .map(|(_, s, t)| (*s, t.clone()))
    }
}

/// Signature of something callable, from the AST: parameter names and
/// whether each has a default.
#[derive(Clone, Debug, Default)]
struct Sig {
    params: Vec<(String, bool)>,
    variadic: bool,
}

#[derive(Default)]
struct Checker {
    sources: Sources,
    files: Vec<ast::File>,
    diags: Vec<Diagnostic>,
    syms: Interner,
    globals: Vec<HashMap<String, Global>>,
    configs: Vec<Config>,
    modules: Vec<Module>,
    fns: Vec<Function>,
    // AST indexes of each declared global, parallel to configs/modules/fns.
    config_ast: Vec<(SourceId, usize)>,
    module_ast: Vec<(SourceId, usize)>,
    fn_ast: Vec<(SourceId, usize)>,
    /// Per module: member top-level names with static types, fn signatures.
    module_info: Vec<ModuleInfo>,
    import_ids: HashMap<String, SourceId>,
}

#[derive(Default, Clone)]
struct ModuleInfo {
    ctor: Sig,
    fns: HashMap<String, Sig>,
    /// Full dotted path -> static type of every member.
    members: HashMap<Vec<String>, SType>,
}

fn sig_of(params: &[ast::Param]) -> Sig {
    Sig {
        params: params
            .iter()
            .map(|p| (p.name.name.clone(), p.default.is_some()))
            .collect(),
        variadic: false,
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// "did you mean `x`?" when a candidate is close.
fn suggest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<String> {
    let limit = if name.len() <= 3 {
        1
    } else {
        (name.len() / 3).clamp(2, 3)
    };
    candidates
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, c)| format!("did you mean `{c}`?"))
}

impl Checker {
    fn err(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    // ---------------------------------------------------------------- loading

    fn load(&mut self, name: &str, text: &str, resolver: &dyn Resolver) {
        self.add_file(name, text);
        let mut next = 0;
        while next < self.files.len() {
            let imports: Vec<ast::Import> = self.files[next]
                .items
                .iter()
                .filter_map(|i| {
                    if let ast::Item::Import(imp) = i {
                        Some(imp.clone())
                    } else {
                        None
                    }
                })
                .collect();
            for imp in imports {
                let key = imp.name.name.clone();
                if self.import_ids.contains_key(&key) {
                    continue;
                }
                match resolver.resolve(&key) {
                    Some((path, src)) => {
                        let id = self.add_file(&path, &src);
                        self.import_ids.insert(key, id);
                    }
                    None => self.err(
                        Diagnostic::new("mdl::check::unknown_import", next, format!("cannot find module file `{key}`"))
                            .label(imp.name.span, "no stdlib file or file beside the script has this name")
                            .help(format!("the stdlib ships `nn`; a local import needs `{key}.mdl` next to the script")),
                    ),
                }
            }
            next += 1;
        }
    }

    fn add_file(&mut self, name: &str, text: &str) -> SourceId {
        let id = self.sources.add(name, text);
        let (file, diags) = parser::parse(text, id);
        self.diags.extend(diags);
        self.files.push(file);
        self.globals.push(HashMap::new());
        id
    }
}
