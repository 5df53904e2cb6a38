-- Offline check of contrib/bench/job_submit.lua with a stub `slurm` table (no slurmctld):
--   TEAMSHARE_CONFIG=tests/live/teamshare.toml lua5.1 contrib/bench/test-job_submit.lua
-- (apt-get install lua5.1: the interpreter job_submit/lua links in Debian 12). Exits 1 on a failure.
slurm = { SUCCESS = 0, ERROR = -1, ESLURM_INVALID_ACCOUNT = 2045, ESLURM_ACCOUNTING_POLICY = 2050,
  NO_VAL = 4294967294, NO_VAL16 = 65534 }
local last = nil
function slurm.log_info(fmt, ...) print("info: " .. string.format(fmt, ...)) end
function slurm.log_error(fmt, ...) print("error: " .. string.format(fmt, ...)) end
function slurm.log_user(fmt, ...) last = string.format(fmt, ...) end
local here = string.match(arg[0], "^(.*)/[^/]*$") or "."
dofile(here .. "/job_submit.lua")
local function job(t)
  local j = { min_nodes = slurm.NO_VAL, num_tasks = slurm.NO_VAL, ntasks_per_node = slurm.NO_VAL16, sockets_per_node = slurm.NO_VAL16, partition = "gpu" }
  for k, v in pairs(t) do j[k] = v end
  return j
end
local cases = {
  { job{ account = "agents", tres_per_node = "gres:gpu:1" }, 0 },
  { job{ account = "agents", tres_per_node = "gres:gpu:4" }, 0 },
  { job{ account = "agents", tres_per_node = "gres:gpu:5" }, 2050 },
  { job{ account = "agents", tres_per_job = "gres/gpu:6" }, 2050 },
  { job{ account = "agents", tres_per_node = "gres:gpu:2", min_nodes = 3 }, 2050 },
  { job{ account = "agents", tres_per_task = "gres:gpu:1", num_tasks = 5 }, 2050 },
  { job{ account = "agents", tres_per_node = "gres:gpu:h100:2,gres:gpu:1" }, 0 },
  { job{ account = "nosuch", tres_per_node = "gres:gpu:1" }, 2045 },
  { job{ tres_per_node = "gres:gpu:1" }, 2045 },
  { job{ }, 0 },
  { job{ account = "nosuch", tres_per_node = "gres:gpu:1", partition = "cpu" }, 0 },
  { job{ account = "research", tres_per_node = "gres:gpu:8" }, 0 },
  { job{ account = "research", tres_per_node = "gres:gpu:9" }, 2050 },
  { job{ account = "agents", tres_per_node = "gres:gpu:1", qos = "standard" }, 0 },
  { job{ account = "agents", tres_per_node = "gres:gpu:1", qos = "gold" }, -1 },
  { job{ account = "agents", tres_per_node = "gres:gpu:1", qos = "teamshare" }, -1 },
  { job{ account = "agents", tres_per_node = "gres:gpu:lots:x" }, -1 },
  { job{ account = "agents", tres_per_node = "gres:gpumem:100" }, 0 },
}
local fails = 0
for i, c in ipairs(cases) do
  last = nil
  local rc = slurm_job_submit(c[1], {}, 1000)
  local ok = rc == c[2]
  if not ok then fails = fails + 1 end
  print(string.format("%2d %s rc=%d want=%d %s", i, ok and "ok  " or "FAIL", rc, c[2], last or ""))
end
print(fails == 0 and "all ok" or (fails .. " failed"))
if fails > 0 then os.exit(1) end
