fn main() {
    let args: Vec<String> = std::env::args().collect();
    let map = accountd::replay::swf::read_team_map(std::path::Path::new(&args[2])).unwrap();
    let (trace, _) =
        accountd::replay::swf::load_file(std::path::Path::new(&args[1]), &map, None).unwrap();
    let config = teamshare_config::load(std::path::Path::new(&args[3])).unwrap();
    eprintln!(
        "{} jobs, {} nodes",
        trace.jobs.len(),
        trace.cluster.nodes.len()
    );
    let t = std::time::Instant::now();
    let o = accountd::replay::sim::simulate(&trace, &config, &Default::default(), &mut |_| {});
    eprintln!("simulated in {:?}, {} passes", t.elapsed(), o.passes);
}
