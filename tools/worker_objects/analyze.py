"""Fit per-step growth of the probe's in-worker counts (and of the parent's USS readings)."""
from __future__ import annotations

import json
import sys

import numpy as np


def slope(x, y):
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0:
        return None
    return float(np.polyfit(x, y, 1)[0])


def halves(x, y):
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 6:
        return None, None
    mid = (x.min() + x.max()) / 2
    a, b = x < mid, x >= mid
    return slope(x[a], y[a]), slope(x[b], y[b])


def step_position(ends, t):
    """Fractional number of steps completed at monotonic time t."""
    ends = np.asarray(ends)
    k = int(np.searchsorted(ends, t, side="right"))
    if k == 0:
        return 0.0
    if k >= len(ends):
        return float(len(ends))
    return k + (t - ends[k - 1]) / (ends[k] - ends[k - 1])


def fit(res, min_span=20, min_n=8):
    w0, w1 = res["warmup"], res["warmup"] + res["steps"]
    ends = res["ends"]
    out = {"spec": res["spec"], "error": res["error"], "n_steps": len(ends),
           "step_ms_median": 1000 * float(np.median(res["durs"])) if res["durs"] else None, "children": {}}
    if len(ends) < w1:
        w1 = len(ends)
    # per child: objects and blocks
    for pid, s in res["samples"].items():
        rows = [r for r in s["rows"] if r[1] == 1]  # rows taken right after gc.collect()
        xs = np.array([step_position(ends, r[0]) for r in rows]) if rows else np.array([])
        keep = (xs >= w0) & (xs <= w1) if len(xs) else np.array([], bool)
        x = xs[keep] if len(xs) else xs
        objs = np.array([r[3] for r in rows], float)[keep] if rows else np.array([])
        blocks = np.array([r[2] for r in rows], float)[keep] if rows else np.array([])
        c = {"head": s["head"], "n_samples": int(len(x)), "span_steps": float(np.ptp(x)) if len(x) else 0.0,
             "probe_cost_ms_median": 1000 * float(np.median([r[4] for r in s["rows"]])) if s["rows"] else None,
             "objs_first_last": [float(objs[0]), float(objs[-1])] if len(objs) else None,
             "alive_from_to": [float(xs.min()), float(xs.max())] if len(xs) else None}
        if len(x) >= min_n and c["span_steps"] >= min_span:
            c["objs_slope"] = slope(x, objs)
            c["objs_h1"], c["objs_h2"] = halves(x, objs)
            c["blocks_slope"] = slope(x, blocks)
            c["blocks_h1"], c["blocks_h2"] = halves(x, blocks)
            c["scored"] = True
        else:
            c["scored"] = False
        out["children"][pid] = c
    # per child USS from the parent's readings (KiB/step)
    if res["uss"]:
        pids = sorted({p for row in res["uss"] for p in row})
        for pid in pids:
            pts = [(i + 1, row[pid]) for i, row in enumerate(res["uss"]) if pid in row and w0 <= i + 1 <= w1]
            c = out["children"].setdefault(pid, {"head": "(no probe samples)", "scored": False})
            if len(pts) >= min_n and pts[-1][0] - pts[0][0] >= min_span:
                x, y = zip(*pts, strict=True)
                c["uss_kib_slope"] = slope(x, np.array(y) / 1024)
                c["uss_kib_h1"], c["uss_kib_h2"] = halves(x, np.array(y) / 1024)
    # total over the children alive at each step end (what survives worker restarts)
    tot_x, tot_o, tot_b = [], [], []
    series = {pid: [(r[0], r[2], r[3]) for r in s["rows"] if r[1] == 1] for pid, s in res["samples"].items()}
    for i in range(w0, w1):
        t = ends[i]
        so = sb = 0
        any_alive = False
        for rows in series.values():
            if not rows or rows[0][0] > t or rows[-1][0] < t - 0.25:
                continue  # not started yet, or gone
            last = max((r for r in rows if r[0] <= t), key=lambda r: r[0])
            so += last[2]
            sb += last[1]
            any_alive = True
        if any_alive:
            tot_x.append(i + 1)
            tot_o.append(so)
            tot_b.append(sb)
    if len(tot_x) >= min_n:
        out["total_objs_slope"] = slope(tot_x, tot_o)
        out["total_objs_h1"], out["total_objs_h2"] = halves(tot_x, tot_o)
        out["total_blocks_slope"] = slope(tot_x, tot_b)
        out["total_blocks_h1"], out["total_blocks_h2"] = halves(tot_x, tot_b)
    scored = [c for c in out["children"].values() if c.get("scored")]
    for k in ("objs_slope", "objs_h1", "objs_h2", "blocks_slope", "blocks_h1", "blocks_h2"):
        v = [c[k] for c in scored if c.get(k) is not None]
        out["mean_" + k] = float(np.mean(v)) if v else None
    u = [c["uss_kib_slope"] for c in out["children"].values() if c.get("uss_kib_slope") is not None]
    out["mean_uss_kib_slope"] = float(np.mean(u)) if u else None
    out["max_uss_kib_slope"] = float(np.max(u)) if u else None
    out["n_children"] = len(out["children"])
    out["n_scored"] = len(scored)
    # rules
    out["rule_objs_worker"] = any((c.get("objs_h1") or 0) >= 1 and (c.get("objs_h2") or 0) >= 1 for c in scored)
    out["max_min_half_objs"] = max((min(c["objs_h1"], c["objs_h2"]) for c in scored
                                    if c.get("objs_h1") is not None and c.get("objs_h2") is not None), default=None)
    out["max_min_half_blocks"] = max((min(c["blocks_h1"], c["blocks_h2"]) for c in scored
                                      if c.get("blocks_h1") is not None and c.get("blocks_h2") is not None),
                                     default=None)
    out["min_half_total_objs"] = (min(out["total_objs_h1"], out["total_objs_h2"])
                                  if out.get("total_objs_h1") is not None and out.get("total_objs_h2") is not None
                                  else None)
    return out


if __name__ == "__main__":
    for p in sys.argv[1:]:
        r = fit(json.load(open(p)))
        print(json.dumps({k: v for k, v in r.items() if k != "children"}, indent=None))
        for pid, c in r["children"].items():
            print("  ", pid, json.dumps(c))
