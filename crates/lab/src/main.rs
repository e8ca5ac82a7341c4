//! `foliocache-lab`: see the crate docs of `foliocache_lab`.

fn main() {
    std::process::exit(foliocache_lab::cli::main());
}
