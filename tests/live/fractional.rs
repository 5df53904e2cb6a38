//! Fractional GPUs (issue 30). Refused shares run on the per-type cluster (`Spec::TYPED`),
//! whose n3 offers its 4 H100 as 4 shards each (`gres/shard`, 16 in all) beside the whole
//! GPUs, and whose configuration declares no `[gpu_types.shard]`; the MIG-like slices on a
//! cluster of their own (`Spec::FRACTIONAL`, [`SLICES`]); governed shards on another
//! (`Spec::SHARDS`, [`SHARDS`]).
//!
//! Slurm counts a share apart from `gres/gpu` (a job with `--gres=shard:2` holds `gres/shard=2`
//! and no GPU; sbatch itself refuses a job asking for both), so where the configuration does
//! not govern shards in GPU-equivalents a share in a governed partition is refused, at submit
//! and at `scontrol update` (docs/design/fractional-gpus.md).

use std::time::{Duration, Instant};

use teamshare_live_tests::{ensure, gres_text, Cluster, TestResult};

use crate::accounting::{ingest_and_collect, json_rows, start_samplers_on};
use crate::governance::isolated;
use crate::typed::{held, held_of};

type Scenario = (&'static str, fn(&Cluster) -> TestResult);

/// On `Spec::FRACTIONAL`.
pub const SLICES: &[Scenario] = &[
    (
        "fractional::f03_slices_under_quotas_in_gpu_equivalents_are_capped_borrowed_and_reclaimed_one_by_one",
        slices_borrowed_and_reclaimed,
    ),
    (
        "fractional::f07_a_slice_jobs_samples_are_its_own_slices",
        slices_sampled,
    ),
];

/// On `Spec::SHARDS`.
pub const SHARDS: &[Scenario] = &[
    (
        "fractional::f04_shards_under_quotas_in_gpu_equivalents_are_counted_capped_borrowed_and_reclaimed_one_by_one",
        shards_borrowed_and_reclaimed,
    ),
    (
        "fractional::f05_a_whole_gpu_is_taken_back_from_borrowed_shards_and_from_no_other",
        whole_gpu_from_shards,
    ),
    (
        "fractional::f06_shards_are_taken_back_from_a_gpu_a_borrower_holds_whole",
        shards_from_whole_gpu,
    ),
];

/// On `Spec::TYPED`.
pub const SCENARIOS: &[Scenario] = &[
    (
        "fractional::f01_gpu_shares_are_refused_where_teams_are_governed",
        shares_refused,
    ),
    (
        "fractional::f02_teams_hold_no_shard_in_slurm_through_the_governors_limit_moves",
        shards_held_at_zero,
    ),
];

const MINUTE: Duration = Duration::from_secs(60);

const SAYS: &str = "teamshare: GPU shares (gres/shard) are not counted in team quotas, so partitions gpu take whole GPUs only: --gres=gpu:N or --gpus=N";

fn refused(r: Result<String, String>, what: &str) -> TestResult {
    crate::governance::refused(r, what, SAYS)
}

fn shares_refused(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        // The cluster really offers shards: without them the refusals below would prove
        // nothing about shares Slurm could have run.
        let gres = c.ok("sinfo", &["-h", "-N", "-n", "n3", "-o", "%G"])?;
        ensure(gres.contains("shard:"), || {
            format!("n3 offers no shards ({gres:?}): the cluster was not started with SHARDS")
        })?;
        refused(
            c.sbatch(&[
                "-A",
                "agents",
                "-p",
                "gpu",
                "--gres=shard:2",
                "--wrap",
                "sleep 60",
            ]),
            "two shards for agents",
        )?;
        refused(
            c.sbatch_as_user(&[
                "-A",
                "research",
                "-p",
                "gpu",
                "--gres=shard:h100:1",
                "--wrap",
                "sleep 60",
            ]),
            "a typed shard by a user",
        )?;
        refused(
            c.sbatch(&[
                "-p",
                "gpu",
                "-N",
                "2",
                "--gres=shard:1",
                "--wrap",
                "sleep 60",
            ]),
            "a shard per node on two nodes without an account",
        )?;

        // A user's update of a waiting job to a share is refused like a submission, and the
        // job keeps its request.
        let held = c.sbatch_as_user(&[
            "-A",
            "agents",
            "-p",
            "gpu",
            "--gres=gpu:h100:1",
            "--hold",
            "--wrap",
            "sleep 60",
        ])?;
        let update = c.run_as_user(
            "scontrol",
            &[
                "update",
                &format!("jobid={held}"),
                "Account=agents",
                "TresPerJob=",
                "TresPerNode=gres:shard:2",
                "TresPerTask=",
                "TresPerSocket=",
                "NumNodes=1",
            ],
        )?;
        let said = c
            .modify_refusal(&update)
            .map_err(|e| format!("an update to two shards: {e}"))?;
        ensure(said.contains("GPU shares (gres/shard)"), || {
            format!("an update to two shards was refused with {said:?}")
        })?;
        let tres = c.ok("squeue", &["-h", "-j", &held, "-O", "tres-per-node"])?;
        ensure(gres_text(&tres) == "gres:gpu:h100:1", || {
            format!("the refused update changed the job's request to {tres:?}")
        })
    })
}

/// A team's GrpTRES as slurmdbd has it (its account's association, not its users').
fn grp_tres(c: &Cluster, team: &str) -> Result<String, String> {
    let out = c.ok(
        "sacctmgr",
        &[
            "-n",
            "-P",
            "show",
            "associations",
            "where",
            &format!("account={team}"),
            "format=User,GrpTRES",
        ],
    )?;
    out.lines()
        .find_map(|l| l.strip_prefix('|'))
        .map(|t| t.trim().to_string())
        .ok_or_else(|| format!("no association of account {team} in {out:?}"))
}

/// setup-slurm gave every team `GrpTRES=gres/shard=0`, since slurmdbd accounts shards here:
/// Slurm itself keeps a team's shard job from starting, whatever reached the queue. The
/// governor's limit moves (here agents borrowing a third H100) keep it.
fn shards_held_at_zero(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        for team in ["agents", "training", "research"] {
            let tres = grp_tres(c, team)?;
            ensure(tres.split(',').any(|e| e == "gres/shard=0"), || {
                format!("{team}'s GrpTRES {tres:?} does not hold shards at 0")
            })?;
        }
        // agents: quota 2 H100, borrow limit 4 of any type; n3's 4 H100 are free.
        let jobs: Vec<String> = (0..3)
            .map(|_| {
                c.sbatch(&[
                    "-A",
                    "agents",
                    "-p",
                    "gpu",
                    "--gres=gpu:h100:1",
                    "--wrap",
                    "sleep 300",
                ])
            })
            .collect::<Result<_, _>>()?;
        c.wait_for(
            "agents' three H100 jobs to run (the third borrowed)",
            Duration::from_secs(60),
            || {
                let out = c.ok(
                    "squeue",
                    &["-h", "-t", "R", "-o", "%i", "-j", &jobs.join(",")],
                )?;
                Ok((out.lines().count() == 3).then_some(()))
            },
        )
        .map_err(|e| format!("{e}\n{}", c.diagnosis()))?;
        let tres = grp_tres(c, "agents")?;
        ensure(
            tres.split(',').any(|e| e == "gres/shard=0")
                && tres.split(',').any(|e| {
                    e.strip_prefix("gres/gpu:h100=")
                        .and_then(|n| n.parse::<u32>().ok())
                        .is_some_and(|n| n >= 3)
                }),
            || format!("after the governor raised agents' H100 limit its GrpTRES is {tres:?}"),
        )
    })
}

/// A part of a GPU a scenario runs jobs of: its type, as `held` names it, and how a job asks
/// for one.
#[derive(Clone, Copy)]
struct Part {
    kind: &'static str,
    gres: &'static str,
    /// How many make one A100's worth.
    per_gpu: u32,
}

const SLICE: Part = Part {
    kind: "1g.10gb",
    gres: "--gres=gpu:1g.10gb:1",
    per_gpu: 7,
};

const SHARD: Part = Part {
    kind: "shard",
    gres: "--gres=shard:1",
    per_gpu: 4,
};

/// `n` sleeps of one `part` each for `team`.
fn parts(c: &Cluster, part: Part, team: &str, n: u32) -> Result<Vec<String>, String> {
    (0..n)
        .map(|_| c.sbatch(&["-A", team, "-p", "gpu", part.gres, "--wrap", "sleep 3600"]))
        .collect()
}

fn wait_parts(c: &Cluster, part: Part, team: &str, n: u32) -> TestResult {
    c.wait_for(
        &format!("{team} to hold {n} of {}", part.kind),
        Duration::from_secs(120),
        || Ok((held_of(&held(c)?, team, part.kind) == n).then_some(())),
    )
    .map_err(|e| format!("{e}\n{}", c.diagnosis()))
}

/// MIG-like slices (`1g.10gb`, a seventh of an A100, each a device of its own) under quotas
/// in GPU-equivalents. serve (quota 1 A100's worth, borrows nothing) runs 7 slices and no
/// more while 14 stand idle: its 8th waits, and Slurm's limits say 7 slices and no whole A100.
/// inference (1 + borrow 1) fills the 14: 7 of its quota and dev's 7 idle ones, borrowed; a
/// 15th waits. dev then takes 3 back: exactly 3 of inference's borrowed slices are requeued,
/// none of its own.
fn slices_borrowed_and_reclaimed(c: &Cluster) -> TestResult {
    parts_borrowed_and_reclaimed(c, SLICE)
}

/// Shares of a GPU (`gres/shard`, 4 per A100) counted in GPU-equivalents, on a cluster of
/// three A100s offering 12 shards: the same story as [`slices_borrowed_and_reclaimed`], with
/// 4 shards to an A100's worth. serve runs 4 shards and no more while 8 stand idle (Slurm's
/// `gres/shard` limit says 4); inference fills the 8 (4 borrowed of dev's idle quota); dev
/// takes 3 back, requeueing exactly 3 of inference's borrowed shards.
fn shards_borrowed_and_reclaimed(c: &Cluster) -> TestResult {
    parts_borrowed_and_reclaimed(c, SHARD)
}

fn parts_borrowed_and_reclaimed(c: &Cluster, part: Part) -> TestResult {
    let n = part.per_gpu;
    isolated(c, |c| {
        parts(c, part, "serve", n)?;
        wait_parts(c, part, "serve", n)?;
        let beyond = parts(c, part, "serve", 1)?.remove(0);
        held_back(c, "serve", &beyond, &[(part.kind, n), ("a100", 0)])?;

        let own = parts(c, part, "inference", n)?;
        wait_parts(c, part, "inference", n)?;
        let borrowed = parts(c, part, "inference", n)?;
        wait_parts(c, part, "inference", 2 * n)?;
        let beyond = parts(c, part, "inference", 1)?.remove(0);
        held_back(c, "inference", &beyond, &[(part.kind, 2 * n)])?;

        let mut latencies = Vec::new();
        let mut dev = Vec::new();
        for _ in 0..3 {
            dev.push((parts(c, part, "dev", 1)?.remove(0), Instant::now()));
        }
        for (id, t0) in &dev {
            c.wait_for(
                &format!("dev's {} job {id} to run", part.kind),
                Duration::from_secs(60),
                || Ok((c.job_state(id)? == "RUNNING").then_some(())),
            )
            .map_err(|e| format!("{e}\n{}", c.diagnosis()))?;
            latencies.push(t0.elapsed());
        }
        // The time is the benchmark's to judge (reclaim-latency.sh MODE=slices); here, that
        // dev's jobs run at all shows the reclaim, as no idle slice was left.
        eprintln!(
            "{} reclaim: sbatch to RUNNING of dev's 3: {latencies:?}",
            part.kind
        );
        wait_parts(c, part, "inference", 2 * n - 3)?;
        for id in &own {
            let st = c.job_state(id)?;
            ensure(st == "RUNNING", || {
                format!("inference's in-quota {} {id} is {st}", part.kind)
            })?;
        }
        let requeued: Vec<&String> = borrowed
            .iter()
            .filter(|id| c.job_state(id).is_ok_and(|st| st == "PENDING"))
            .collect();
        ensure(requeued.len() == 3, || {
            format!(
                "{} of inference's borrowed {} jobs were requeued, not 3: {requeued:?}",
                requeued.len(),
                part.kind
            )
        })
    })
}

/// A whole A100 taken back from shards. Every A100 holds one job of 4 shards: serve's and
/// inference's in their quotas, inference's second borrowed of dev's idle quota. dev asks for
/// a whole A100 of its quota: Slurm has no GPU for it (a GPU with shards in use is not there
/// for a whole-GPU job), and the governor frees the GPU whose shards are all borrowed.
/// inference's second job is requeued, no other, and dev's A100 runs.
fn whole_gpu_from_shards(c: &Cluster) -> TestResult {
    taken_back_across(
        c,
        Across {
            fill: "--gres=shard:4",
            part: SHARD,
            per_job: 4,
            held: "shards",
            claim: "--gres=gpu:a100:1",
            claimed: "whole A100",
        },
    )
}

/// The other way round: serve holds a whole A100 of its quota, inference two (the second
/// borrowed of dev's idle quota). dev asks for 2 shards of its quota: every GPU is held
/// whole, and the governor frees the borrowed one. inference's second A100 is requeued, no
/// other, and dev's shards run.
fn shards_from_whole_gpu(c: &Cluster) -> TestResult {
    let a100 = Part {
        kind: "a100",
        ..SHARD
    };
    taken_back_across(
        c,
        Across {
            fill: "--gres=gpu:a100:1",
            part: a100,
            per_job: 1,
            held: "A100",
            claim: "--gres=shard:2",
            claimed: "2 shards",
        },
    )
}

/// A reclaim across the two kinds of job one GPU serves: what the three GPUs are filled with,
/// and what dev claims of its quota.
struct Across {
    /// One job of serve's, then two of inference's (the second borrowed), each a whole GPU.
    fill: &'static str,
    part: Part,
    /// Of `part`, per job.
    per_job: u32,
    held: &'static str,
    claim: &'static str,
    claimed: &'static str,
}

/// Every GPU is held by one job of the other kind (serve's and inference's in their quotas,
/// inference's second borrowed); dev's claim runs, and only the borrowed job is requeued.
fn taken_back_across(c: &Cluster, a: Across) -> TestResult {
    isolated(c, |c| {
        let fill =
            |team: &str| c.sbatch(&["-A", team, "-p", "gpu", a.fill, "--wrap", "sleep 3600"]);
        let serve = fill("serve")?;
        wait_parts(c, a.part, "serve", a.per_job)?;
        let own = fill("inference")?;
        wait_parts(c, a.part, "inference", a.per_job)?;
        let borrowed = fill("inference")?;
        wait_parts(c, a.part, "inference", 2 * a.per_job)?;
        let t0 = Instant::now();
        let dev = c.sbatch(&["-A", "dev", "-p", "gpu", a.claim, "--wrap", "sleep 3600"])?;
        c.wait_for(
            &format!("dev's {} {dev} to run", a.claimed),
            Duration::from_secs(90),
            || Ok((c.job_state(&dev)? == "RUNNING").then_some(())),
        )
        .map_err(|e| format!("{e}\n{}", c.diagnosis()))?;
        let (claimed, held) = (a.claimed, a.held);
        eprintln!(
            "{claimed} from {held}: sbatch to RUNNING {:?}",
            t0.elapsed()
        );
        let st = c.job_state(&borrowed)?;
        ensure(st == "PENDING", || {
            format!("inference's borrowed {held} {borrowed} is {st}, not requeued")
        })?;
        for (who, id) in [("serve", &serve), ("inference", &own)] {
            let st = c.job_state(id)?;
            ensure(st == "RUNNING", || {
                format!("{who}'s in-quota {held} {id} is {st}")
            })?;
        }
        Ok(())
    })
}

/// `job` of `team` still waits after two governor passes, and the team's GrpTRES holds the
/// given per-type ceilings.
fn held_back(c: &Cluster, team: &str, job: &str, ceilings: &[(&str, u32)]) -> TestResult {
    for _ in 0..2 {
        c.wait_governor_pass()?;
    }
    ensure(c.job_state(job)? == "PENDING", || {
        format!("{team} ran {job} beyond its ceiling")
    })?;
    let tres = grp_tres(c, team)?;
    for (kind, n) in ceilings {
        let name = match *kind {
            "shard" => "gres/shard".to_string(),
            k => format!("gres/gpu:{k}"),
        };
        ensure(tres.split(',').any(|e| e == format!("{name}={n}")), || {
            format!("{team}'s GrpTRES is {tres:?}, expected its {kind} ceiling of {n}")
        })?;
    }
    Ok(())
}

/// The dev cluster's MIG-like slices are device files of their own, and the fake NVML offers
/// one device per slice (`MIG-n1-K`, each at its own utilisation, 10 % to 70 %): a slice job's
/// samples are those of the slices Slurm gave it (its IDX, through the device files, as for
/// whole GPUs), and no other slice's.
fn slices_sampled(c: &Cluster) -> TestResult {
    isolated(c, |c| {
        let spool = c.dir.join("samples-f07");
        let _ = std::fs::remove_dir_all(&spool);
        let util = |k: u32| 10 * (k + 1);
        let slices: Vec<(String, u32)> = (0..7).map(|k| (format!("MIG-n1-{k}"), util(k))).collect();
        let samplers = start_samplers_on(c, &spool, &[("n1", slices)])?;
        let id = c.sbatch(&[
            "-A",
            "serve",
            "-p",
            "gpu",
            "-w",
            "n1",
            "--gres=gpu:1g.10gb:2",
            "--wrap",
            "sleep 8",
        ])?;
        let idx = c.wait_for(&format!("job {id}'s slices"), MINUTE, || {
            let detail = c.ok("scontrol", &["-d", "show", "job", &id])?;
            Ok(slice_indices(&detail))
        })?;
        ensure(idx.len() == 2, || format!("job {id} holds slices {idx:?}"))?;
        c.wait_completed_in_sacct(std::slice::from_ref(&id), 2 * MINUTE)?;
        // Let the last ticks reach the spool, then stop sampling.
        std::thread::sleep(Duration::from_secs(3));
        drop(samplers);
        let db = ingest_and_collect(c, "f07", &spool)?;
        let args = ["--database", &db, "report", "jobs", "--since", "now-1h"];
        let out =
            c.accountd_cmd(&[&args[..], &["--until", "now+1h", "--format", "json"]].concat())?;
        let jobs = json_rows(&out, "report jobs")?;
        let row = jobs
            .iter()
            .find(|r| r["job"].as_str() == Some(id.as_str()))
            .ok_or_else(|| format!("job {id} missing from report jobs: {jobs:?}"))?;
        let want = f64::from(idx.iter().map(|&k| util(k)).sum::<u32>()) / 2.0;
        let mean = row["mean_util_percent"].as_f64().unwrap_or(f64::NAN);
        ensure((mean - want).abs() < 0.5, || {
            format!("job {id} on slices {idx:?}: mean {mean} %, want {want} %: {row}")
        })?;
        // Both slices sampled while the job held them, within a 1 s interval per slice.
        let f = |k: &str| row[k].as_f64().unwrap_or(f64::NAN);
        let slack = 2.0 * 2.0 / 3600.0;
        ensure(
            (f("sampled_gpu_hours") - f("gpu_hours")).abs() <= slack,
            || format!("job {id}: {row}"),
        )
    })
}

/// The slice indices of `scontrol -d show job`'s `GRES=gpu:1g.10gb:2(IDX:0-1)` (empty until
/// the job runs).
fn slice_indices(detail: &str) -> Option<Vec<u32>> {
    let at = detail.find("(IDX:")? + "(IDX:".len();
    let list = &detail[at..at + detail[at..].find(')')?];
    let mut out = Vec::new();
    for part in list.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        out.extend(a.trim().parse::<u32>().ok()?..=b.trim().parse::<u32>().ok()?);
    }
    Some(out)
}
