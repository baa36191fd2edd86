#!/usr/bin/env python3
"""Per-thread CPU of the processes named COMM over a window of SECONDS: how evenly a
server's threads (the worker's rings, Tokio's workers, nginx's processes) shared the load.

    scripts/thread_cpu.py OUTFILE SECONDS COMM [COMM...]

Writes JSON: for each thread busy more than 0.5% of the window, its share of one core
(user + system), the CPU it last ran on and its context switches; and each CPU's busy
share (steal included). Processes are matched by /proc/PID/comm. Used by
scripts/many_core_open_loop.sh."""
import json, os, sys, time
out, secs, comms = sys.argv[1], float(sys.argv[2]), set(sys.argv[3:])
tck = os.sysconf("SC_CLK_TCK")

def procs():
    r = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                c = open(f"/proc/{p}/comm").read().strip()
            except OSError:
                continue
            if c in comms:
                r.append(int(p))
    return r

def snap(pids):
    s = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for t in tids:
            try:
                st = open(f"/proc/{pid}/task/{t}/stat").read()
                comm = st[st.index("(") + 1 : st.rindex(")")]
                f = st[st.rindex(")") + 2 :].split()
                ut, stt, cpu = int(f[11]), int(f[12]), int(f[36])
                cs = {}
                for line in open(f"/proc/{pid}/task/{t}/status"):
                    if line.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")):
                        k, v = line.split(":")
                        cs[k] = int(v)
                s[(pid, int(t))] = (comm, ut, stt, cpu, cs.get("voluntary_ctxt_switches", 0), cs.get("nonvoluntary_ctxt_switches", 0))
            except (OSError, ValueError, IndexError):
                pass
    return s

def cpustat():
    d = {}
    for line in open("/proc/stat"):
        if line.startswith("cpu") and line[3].isdigit():
            f = line.split()
            v = list(map(int, f[1:]))
            d[int(f[0][3:])] = (sum(v) - v[3] - v[4], sum(v))
    return d

pids = procs()
a, ca, t0 = snap(pids), cpustat(), time.monotonic()
time.sleep(secs)
b, cb, t1 = snap(pids), cpustat(), time.monotonic()
dt = t1 - t0
rows = []
for k, v in b.items():
    if k in a:
        u = (v[1] - a[k][1]) / tck
        s = (v[2] - a[k][2]) / tck
        rows.append({"pid": k[0], "tid": k[1], "comm": v[0], "busy": round((u + s) / dt, 3), "user": round(u / dt, 3),
                     "sys": round(s / dt, 3), "last_cpu": v[3], "vcs": v[4] - a[k][4], "nvcs": v[5] - a[k][5]})
rows.sort(key=lambda r: -r["busy"])
cpus = {c: round((cb[c][0] - ca[c][0]) / max(1, cb[c][1] - ca[c][1]), 3) for c in cb if c in ca}
json.dump({"window_s": round(dt, 2), "threads": [r for r in rows if r["busy"] > 0.005], "cpu_busy": cpus}, open(out, "w"), indent=1)
