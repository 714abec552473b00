use mllm_dsl::*;
struct Dir(std::path::PathBuf);
impl Resolver for Dir {
    fn resolve(&self, name: &str) -> Option<(String, String)> {
        let p = self.0.join(format!("{name}.mdl"));
        std::fs::read_to_string(&p).ok().map(|t| (p.display().to_string(), t))
    }
}
fn main() {
    let path = std::env::args().nth(1).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let (prog, diags) = check(&path, &text, &Dir("stdlib".into()));
    println!("{}", diagnostic::render_all(&diags, &prog.sources, false));
    println!("{} diags, {} modules", diags.len(), prog.modules.len());
}
