#!/usr/bin/env python3
"""The remote cache as a fleet uses it (docs/remote-cache.md), through the coil CLI, against a
private redis-server this test starts on a free loopback port:

  1. a compile in one cache directory fills Redis;
  2. a second cache directory, with no compiler on PATH and coil copied elsewhere, runs the
     model from Redis (checked against the reference interpreter), and its report says so;
  3. tampered entries (module and whole-graph entry) are refused with a warning and rebuilt,
     and the rebuilt ones serve a compiler-less machine again; another signing key is refused;
  4. Redis stopped: one warning, the compile goes on locally and is right;
  5. eight processes, each with its own cache directory, compiling one new model against one
     Redis at the same time: one compile (one g++ run of the model's module), the seven others
     wait for its lease and load its entry.

    test_remote_cache.py COIL_BINARY WORK_DIR
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from private_redis import PrivateRedis  # noqa: E402

coil, work = sys.argv[1], pathlib.Path(sys.argv[2])
here = pathlib.Path(__file__).resolve().parent
shutil.rmtree(work, ignore_errors=True)
work.mkdir(parents=True)
SECRET = "fleet-secret-for-the-remote-cache-test"


def fail(msg):
    print(f"test_remote_cache: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def Redis():
    try:
        return PrivateRedis()
    except RuntimeError as e:
        fail(str(e))


def env_for(cache, redis, path=None, key=SECRET):
    env = dict(os.environ, COIL_CACHE_DIR=str(work / cache), COIL_REMOTE_CACHE=redis.url,
               COIL_REMOTE_CACHE_KEY=key, COIL_LOGS="cache", OMP_WAIT_POLICY="passive")
    if path is not None:
        env["PATH"] = path
    return env


def coil_run(args, env, what):
    r = subprocess.run([coil, *args], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{what}: coil {' '.join(args)} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def report_of(out_dir):
    return json.loads((pathlib.Path(out_dir) / "report.json").read_text())


# A matmul with constant weights (packed at load), its epilogue and a reduction.
model = str(here.parent / "debug" / "repro_model.coil")
no_compiler = work / "empty-path"
no_compiler.mkdir()

redis = Redis()
try:
    # 1. The first machine compiles and fills Redis.
    r = coil_run(["check", model], env_for("cache-a", redis), "first compile")
    for stored in ("remote stored coil:v1:module:", "remote stored coil:v1:model:"):
        if stored not in r.stderr:
            fail(f"the first compile did not store '{stored}...':\n{r.stderr}")
    keys = redis.cli("--scan", "--pattern", "coil:v1:*").split()
    module_keys = [k for k in keys if k.startswith("coil:v1:module:")]
    model_keys = [k for k in keys if k.startswith("coil:v1:model:")]
    if len(module_keys) != 1 or len(model_keys) != 1:
        fail(f"want one module and one model entry in Redis, got {keys}")

    # 2. A second machine without a compiler runs it from Redis, with coil installed
    #    elsewhere (the keys hold no path: the binary's identity is its build ID).
    elsewhere = work / "elsewhere" / "bin"
    elsewhere.mkdir(parents=True)
    shutil.copy2(coil, elsewhere / "coil")
    r = subprocess.run([str(elsewhere / "coil"), "check", model],
                       env=env_for("cache-b", redis, path=str(no_compiler)),
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"compiler-less machine: exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    if "remote hit coil:v1:model:" not in r.stderr or "remote hit coil:v1:module:" not in r.stderr:
        fail(f"the compiler-less machine did not load from Redis:\n{r.stderr}")
    if "compiled in" in r.stderr:
        fail(f"the compiler-less machine compiled:\n{r.stderr}")
    coil_run(["compile", model, "-o", str(work / "out-c")],
             env_for("cache-c", redis, path=str(no_compiler)), "compiler-less compile")
    rep = report_of(work / "out-c")
    if rep["remote_cache"] != "hit" or rep["model_cache"] != "hit":
        fail(f"report.json: remote_cache {rep['remote_cache']}, model_cache {rep['model_cache']}")

    # 3. Tampered entries are refused and rebuilt.
    for key in module_keys + model_keys:
        length = int(redis.cli("STRLEN", key))
        redis.cli("SETRANGE", key, str(length - 3), "XYZ")
    r = coil_run(["check", model], env_for("cache-d", redis), "tampered entries")
    for key in module_keys + model_keys:
        if f"refusing {key}: its signature does not verify" not in r.stderr:
            fail(f"the tampered {key} was not refused:\n{r.stderr}")
    if r.stderr.count("compiled in") != 1:
        fail(f"after refusing the tampered module, want one compile:\n{r.stderr}")
    r = coil_run(["check", model], env_for("cache-e", redis, path=str(no_compiler)),
                 "rebuilt entries")
    if "remote hit coil:v1:module:" not in r.stderr or "refusing" in r.stderr:
        fail(f"the rebuilt entries do not serve a compiler-less machine:\n{r.stderr}")
    # Another fleet's key verifies nothing of ours: refused, compiled here.
    r = coil_run(["check", model], env_for("cache-f", redis, key="another-fleet-secret-0123"),
                 "other key")
    if "signature does not verify" not in r.stderr or "compiled in" not in r.stderr:
        fail(f"entries signed with another key were not refused:\n{r.stderr}")

    # 4. Redis stopped: one warning, a local compile, the right answer.
    url = redis.url
    redis.stop()
    env = env_for("cache-g", redis)
    env["COIL_REMOTE_CACHE"] = url
    r = coil_run(["check", model], env, "Redis stopped")
    if r.stderr.count("coil: warning:") != 1 or "using the local cache only" not in r.stderr:
        fail(f"with Redis stopped, want exactly one warning:\n{r.stderr}")
    if "compiled in" not in r.stderr:
        fail(f"with Redis stopped, the model was not compiled locally:\n{r.stderr}")

    # 5. Eight processes, one new model, one Redis: one compile.
    redis = Redis()
    fleet_model = work / "fleet.coil"
    fleet_model.write_text(
        "input x: f32[48, 96]\ninput w: f32[96, 80]\n"
        "m = matmul(x, w)\nt = tanh(m)\ns = sum(t) {axes=[1], keepdim=true}\n"
        "y = div(t, s)\noutput y\n")
    procs = []
    for i in range(8):
        out = work / f"fleet-out{i}"
        procs.append((out, subprocess.Popen(
            [coil, "compile", str(fleet_model), "-o", str(out), "--quiet"],
            env=env_for(f"fleet-cache{i}", redis), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)))
    results = []
    for out, p in procs:
        stdout, stderr = p.communicate(timeout=600)
        if p.returncode != 0:
            fail(f"fleet process exited {p.returncode}:\n{stdout}\n{stderr}")
        results.append((report_of(out), stderr))
    module_key = {rep["cache_key"] for rep, _ in results}
    if len(module_key) != 1:
        fail(f"the eight processes built different modules: {module_key}")
    module_key = module_key.pop()
    compiles = sum(err.count(f"miss {module_key}: compiled in") for _, err in results)
    waited = sum("held by another process: waiting" in err for _, err in results)
    remote_hits = sum(rep["remote_cache"] == "hit" for rep, _ in results)
    print(f"eight processes: {compiles} compile of module {module_key}, {remote_hits} loaded it "
          f"from Redis, {waited} waited for the lease")
    if compiles != 1 or remote_hits != 7:
        fail("want one compile and seven remote hits:\n" +
             "\n---\n".join(err for _, err in results))
    if waited == 0:
        fail("no process waited for the lease: the eight did not overlap")
finally:
    redis.stop()
print("test_remote_cache: PASS")
