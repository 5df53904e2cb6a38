--[==[
job_submit.lua: the submit-time team checks of job_submit/teamshare, written for Slurm's stock
job_submit/lua plugin. It is the baseline of contrib/bench/submit-overhead.sh (what a site would
write instead of teamshare's plugin), not a supported part of teamshare.

What it does, as the plugin does (DESIGN §4 rule 7), for jobs in the governed partitions:
  - a GPU job without -A/--account is refused (ESLURM_INVALID_ACCOUNT);
  - an account that is not a [[team]] of teamshare.toml is refused (ESLURM_INVALID_ACCOUNT);
  - more GPUs than quota + borrow_limit is refused (ESLURM_ACCOUNTING_POLICY);
  - --qos must name a [[priority_class]] (or be absent); the internal QOS "teamshare" is for root.
GPUs are counted from tres_per_job, tres_per_node x nodes, tres_per_task x tasks and
tres_per_socket x sockets, in both spellings (22.05 "gres:gpu:2", 23.02+ "gres/gpu:2", typed
"gres:gpu:h100:2"), the smallest placement the request allows, like the plugin.

What it does not do: read the governor's state (in-quota admission levels, reclaim priorities);
the plugin does that from memory, which Lua could only do with file I/O on the submit path.

teamshare.toml is read once when slurmctld loads this script (and again whenever the script file
changes, which is when job_submit/lua reloads it): $TEAMSHARE_CONFIG, else teamshare.toml beside
$SLURM_CONF, else /etc/slurm/teamshare.toml. Only the keys used here are parsed: [cluster]
partitions, [[team]] name/quota/borrow_limit, [[priority_class]] name.
]==]

local INTERNAL_QOS = "teamshare"

local function config_path()
	local p = os.getenv("TEAMSHARE_CONFIG")
	if p and p ~= "" then return p end
	local conf = os.getenv("SLURM_CONF")
	if conf and conf ~= "" then
		local dir = string.match(conf, "^(.*)/[^/]*$")
		if dir then return dir .. "/teamshare.toml" end
	end
	return "/etc/slurm/teamshare.toml"
end

local function unquote(v)
	v = string.gsub(v, "%s+#.*$", "")
	v = string.gsub(v, "^%s+", "")
	v = string.gsub(v, "%s+$", "")
	local s = string.match(v, '^"(.*)"$') or string.match(v, "^'(.*)'$")
	return s or v
end

-- A minimal reader for the keys above; returns nil, why on failure.
local function load_config(path)
	local f, err = io.open(path, "r")
	if not f then return nil, err end
	local cfg = { partitions = {}, teams = {}, team_names = {}, classes = {}, class_names = {} }
	local section, current = nil, nil
	for line in f:lines() do
		local l = string.gsub(line, "^%s+", "")
		if string.match(l, "^%[%[%s*team%s*%]%]") then
			section = "team"
			current = { quota = 0 }
			table.insert(cfg.teams, current)
		elseif string.match(l, "^%[%[%s*priority_class%s*%]%]") then
			section = "class"
			current = {}
			table.insert(cfg.classes, current)
		elseif string.match(l, "^%[") then
			section = string.match(l, "^%[%s*([%w_.]+)%s*%]")
			current = nil
		else
			local key, value = string.match(l, "^([%w_]+)%s*=%s*(.-)%s*$")
			if key then
				if section == "cluster" and key == "partitions" then
					for p in string.gmatch(value, '"([^"]+)"') do
						cfg.partitions[p] = true
					end
				elseif section == "team" and key == "name" then
					current.name = unquote(value)
				elseif section == "team" and key == "quota" then
					current.quota = tonumber(unquote(value)) or 0
				elseif section == "team" and key == "borrow_limit" then
					local v = unquote(value)
					local pct = string.match(v, "^(%d+)%%$")
					if pct then
						current.borrow_pct = tonumber(pct)
					else
						current.borrow = tonumber(v)
					end
				elseif section == "class" and key == "name" then
					current.name = unquote(value)
				end
			end
		end
	end
	f:close()
	for _, t in ipairs(cfg.teams) do
		if t.borrow_pct then
			t.borrow = math.floor(t.quota * t.borrow_pct / 100)
		end
		if t.name then
			cfg.teams[t.name] = t
			table.insert(cfg.team_names, t.name)
		end
	end
	for _, c in ipairs(cfg.classes) do
		if c.name then
			cfg.classes[c.name] = true
			table.insert(cfg.class_names, c.name)
		end
	end
	if next(cfg.partitions) == nil then cfg.partitions["gpu"] = true end
	cfg.team_list = table.concat(cfg.team_names, ", ")
	cfg.class_list = table.concat(cfg.class_names, "|")
	return cfg
end

local CONFIG_PATH = config_path()
local CONFIG, CONFIG_ERR = load_config(CONFIG_PATH)
if CONFIG then
	slurm.log_info("job_submit.lua (teamshare checks): loaded %s teams=%d", CONFIG_PATH, #CONFIG.team_names)
else
	slurm.log_error("job_submit.lua (teamshare checks): cannot read %s: %s", CONFIG_PATH, tostring(CONFIG_ERR))
end

-- GPUs in one TRES request string ("gres:gpu:2,gres:gpu:h100:1", "gres/gpu:4", "gres:gpu").
-- Returns the count, or nil and the entry that cannot be read.
local SUFFIX = { k = 1024, K = 1024, m = 1048576, M = 1048576, g = 1073741824, G = 1073741824 }
local function gpu_count(spec)
	if spec == nil or spec == "" then return 0 end
	local untyped, typed = nil, 0
	for entry in string.gmatch(spec, "[^,;]+") do
		entry = string.gsub(string.gsub(entry, "^%s+", ""), "%s+$", "")
		local name, count = string.match(entry, "^(.-)=(.*)$")
		if not name then
			name, count = string.match(entry, "^(.*):(%d[^:]*)$")
			if not name then name, count = entry, nil end
		end
		local rest = string.match(name, "^gres[/:]gpu(.*)$")
		if rest then
			local gpu_type = nil
			local ok = true
			if rest ~= "" then
				gpu_type = string.match(rest, "^:([^:]+)$")
				if not gpu_type then
					if string.sub(rest, 1, 1) == ":" then return nil, entry end
					ok = false -- gres/gpumem, gres:gpu_x: another GRES
				end
			end
			if ok then
				local n = 1
				if count then
					local digits, unit = string.match(count, "^%s*(%d+)([kKmMgG]?)%s*$")
					if not digits then return nil, entry end
					n = tonumber(digits) * (SUFFIX[unit] or 1)
				end
				if gpu_type then
					typed = typed + n
				else
					untyped = (untyped or 0) + n
				end
			end
		end
	end
	if untyped == nil then return typed end
	if untyped >= typed then return untyped end
	return untyped + typed
end

local function given(v, no_val)
	if v == nil or v == 0 or v == no_val then return nil end
	return v
end

-- The fewest GPUs the request can end up holding (as teamshare_policy::gpus_requested).
local function gpus_requested(job_desc)
	local nodes = given(job_desc.min_nodes, slurm.NO_VAL) or 1
	local num_tasks = given(job_desc.num_tasks, slurm.NO_VAL)
	local per_node = given(job_desc.ntasks_per_node, slurm.NO_VAL16)
	local tasks = num_tasks or ((per_node or 1) * nodes)
	local sockets = (given(job_desc.sockets_per_node, slurm.NO_VAL16) or 1) * nodes
	local total = 0
	for _, part in ipairs({
		{ job_desc.tres_per_job, 1 },
		{ job_desc.tres_per_node, nodes },
		{ job_desc.tres_per_task, tasks },
		{ job_desc.tres_per_socket, sockets },
	}) do
		local n, bad = gpu_count(part[1])
		if n == nil then return nil, bad end
		total = total + n * part[2]
	end
	return total
end

local function governed(partition)
	if partition == nil then return true end
	for p in string.gmatch(partition, "[^,]+") do
		p = string.gsub(string.gsub(p, "^%s+", ""), "%s+$", "")
		if CONFIG.partitions[p] then return true end
	end
	return false
end

local function reject(code, msg)
	slurm.log_user("%s", msg)
	return code
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	local gpus, bad = gpus_requested(job_desc)
	if gpus == nil then
		return reject(slurm.ERROR, "job_submit.lua: cannot read GPU count in `" .. tostring(bad) .. "`")
	end
	local account = job_desc.account
	if account == "" then account = nil end
	if not CONFIG then
		if gpus > 0 or account then
			return reject(slurm.ESLURM_ACCOUNTING_POLICY,
				"job_submit.lua: no valid teamshare.toml is loaded, so GPU jobs cannot be checked; ask the administrator")
		end
		return slurm.SUCCESS
	end
	if not governed(job_desc.partition) or (gpus == 0 and account == nil) then
		return slurm.SUCCESS
	end
	if account == nil then
		return reject(slurm.ESLURM_INVALID_ACCOUNT,
			"job_submit.lua: GPU jobs must name their team with -A/--account (teams: " .. CONFIG.team_list .. ")")
	end
	local team = CONFIG.teams[account]
	if team == nil then
		return reject(slurm.ESLURM_INVALID_ACCOUNT,
			"job_submit.lua: account " .. account .. " is not a team on this cluster; use -A with one of: " .. CONFIG.team_list)
	end
	if team.borrow then
		local ceiling = team.quota + team.borrow
		if gpus > ceiling then
			return reject(slurm.ESLURM_ACCOUNTING_POLICY, string.format(
				"job_submit.lua: team %s may hold at most %d GPUs (quota %d + borrow limit %d); this job asks for %d",
				team.name, ceiling, team.quota, team.borrow, gpus))
		end
	end
	local qos = job_desc.qos
	if qos ~= nil and qos ~= "" then
		if qos == INTERNAL_QOS then
			if submit_uid ~= 0 then
				return reject(slurm.ERROR, "job_submit.lua: QOS " .. INTERNAL_QOS ..
					" is set by teamshare itself; choose a priority class with --qos=" .. CONFIG.class_list)
			end
		elseif not CONFIG.classes[qos] then
			return reject(slurm.ERROR, "job_submit.lua: " .. qos ..
				" is not a priority class; use --qos=" .. CONFIG.class_list .. " or no --qos")
		end
	end
	return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return slurm.SUCCESS
end

return slurm.SUCCESS
