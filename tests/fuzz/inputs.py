"""Bad-input fuzzing of the vramplan CLI, run on demand, best against a
sanitized build (in a clone of its own, since it replaces build/'s objects):

    make build/vramplan CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all"
    python3 tests/fuzz/inputs.py SEED COUNT [config|set|script|arch ...]

VRAMPLAN=path picks another binary than build/vramplan.

config: a Hugging Face config.json of tests/fixtures with a key deleted or
given a value of the wrong kind; set: random --set values for the keys that
`vramplan keys` lists; script: a model or recipe script with a number, a
string or a line replaced (also by sandbox escapes and endless loops);
arch: the same done to an architecture script (models/arch/) in a copy of
the tree (VRAMPLAN_HOME), reaching the core's op and model checks.

Each run must end in an estimate (exit 0, finite byte counts) or a clean
refusal (exit 1, a message on stderr); a sanitizer report, another exit
code, a timeout, a silent failure, a traceback, an address in a message
(table: 0x...) or a message placed in vramplan's own Lua library instead
of the input is printed. The same SEED draws the same inputs.
"""
import glob
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXE = os.environ.get("VRAMPLAN", os.path.join(ROOT, "build", "vramplan"))

JSON_VALUES = [-1, 0, 1, 7, 3.5, 1e-9, 1e30, -1e30, 2**63, 2**64, "", "abc", None, True, False, [], {}, [1, 2]]
SET_VALUES = ["-1", "0", "1", "2", "3", "7", "64", "3.5", "1e30", "1e-30", "nan", "inf", "-inf", "0x10", "", " ",
              "abc", "true", "false", "9223372036854775807", "18446744073709551616", "every-0", "every-99999",
              "all-linear", "q_proj", "lm_head", "norm,lm_head", "none", "cpu", "fp8", "bf16", "nf4", "full",
              "lora", "qlora", "prefix", "prompt", "freeze", "\u00e9", "x" * 300]
LUA_VALUES = ["-1", "0", "3.5", "1e308", "1e-300", "0/0", "1/0", "-0.0", "2^63", "math.huge", "'x'", "''", "{}",
              "{{}}", "nil", "true", "(function() while true do end end)()", "string.rep('x', 1e9)", "os.exit(3)",
              "io.open('/tmp/vramplan-fuzz-escape', 'w')", "require('os')", "load('return 1')()",
              "setmetatable({}, {__index = function() error('boom') end})"]
ESCAPE = "/tmp/vramplan-fuzz-escape"


def recipe_keys():
    out = subprocess.run([EXE, "keys"], capture_output=True, text=True, check=True).stdout
    keys = []
    for line in out.splitlines():
        m = re.match(r"\s+([a-z_0-9]+)\s", line)
        if m:
            keys.append(m.group(1))
    return keys


def mutate_config(r, path):
    fixtures = sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "*.json")))
    config = json.load(open(r.choice(fixtures)))
    for _ in range(r.choice([1, 1, 2])):
        key = r.choice(sorted(config))
        if r.random() < 0.2:
            del config[key]
        else:
            config[key] = r.choice(JSON_VALUES)
    with open(path + ".json", "w") as f:
        json.dump(config, f)
    return [path + ".json"], path + ".json"


def mutate_set(r, keys):
    models = [os.path.basename(p)[:-4] for p in glob.glob(os.path.join(ROOT, "models", "*.lua"))]
    args = [r.choice(sorted(models))]
    for _ in range(r.choice([1, 2, 3, 4])):
        args += ["--set", f"{r.choice(keys)}={r.choice(SET_VALUES)}"]
    if r.random() < 0.3:
        args += ["--set", "finetune=" + r.choice(["lora", "qlora", "prompt", "prefix", "freeze"])]
    return args, None


def mutated_lua(r, text):
    how = r.random()
    if how < 0.6:
        spots = list(re.finditer(r"(?<![\w.])\d+(\.\d+)?(e-?\d+)?(?![\w.])", text))
    elif how < 0.8:
        spots = list(re.finditer(r"\"[^\"\n]*\"|'[^'\n]*'", text))
    else:
        spots = list(re.finditer(r"[^\n]*\n", text))
    if spots:
        m = r.choice(spots)
        text = text[:m.start()] + (r.choice(LUA_VALUES) if how < 0.8 else "") + text[m.end():]
    return text


def mutate_script(r, path):
    recipe = r.random() < 0.4
    sources = sorted(glob.glob(os.path.join(ROOT, "scripts/recipes/*.lua" if recipe else "models/*.lua")))
    with open(path + ".lua", "w") as f:
        f.write(mutated_lua(r, open(r.choice(sources)).read()))
    return (["llama3.2-1b", "--recipe", path + ".lua"] if recipe else [path + ".lua"]), path + ".lua"


# a model of each family, small enough to estimate quickly
FAMILY_MODELS = {"bert": "bert-base-cased", "bloom": "bloom-560m", "gpt2": "gpt2", "gpt_neox": "pythia-1b",
                 "llama": "llama3.2-1b", "phi": "phi-2", "t5": "t5-large"}


def mutate_arch(r, home):
    """Writes a mutated family script over home's copy; the caller restores it."""
    family = r.choice(sorted(FAMILY_MODELS))
    original = os.path.join(ROOT, "models", "arch", family + ".lua")
    made = os.path.join(home, "models", "arch", family + ".lua")
    with open(made, "w") as f:
        f.write(mutated_lua(r, open(original).read()))
    return [FAMILY_MODELS[family]], made


def problem_of(p):
    err = p.stderr
    if "Sanitizer" in err or "runtime error" in err:
        return "sanitizer"
    if p.returncode not in (0, 1):
        return f"exit {p.returncode}"
    if os.path.exists(ESCAPE):
        return "a script wrote outside the sandbox"
    if p.returncode == 1:
        if not err.strip():
            return "failed silently"
        if "traceback" in err.lower() or re.search(r"(table|function): 0x", err):
            return "a traceback or an address in the message"
        if re.search(r"scripts/lib/vramplan/\w+\.lua:\d+", err):
            return "the error placed in vramplan's own library, not the input"
        return None
    try:
        per_gpu = json.loads(p.stdout)["per_gpu"]
    except (ValueError, KeyError) as e:
        return f"no JSON estimate ({e})"
    for field in ("peak_allocated_bytes", "peak_total_bytes"):
        v = per_gpu[field]
        if not isinstance(v, int) or v < 0 or v > 2**62:
            return f"{field} = {v}"
    return None


def main():
    seed, count = int(sys.argv[1]), int(sys.argv[2])
    modes = sys.argv[3:] or ["config", "set", "script", "arch"]
    r = random.Random(seed)
    keys = recipe_keys() if "set" in modes else []
    found = 0
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "input")
        home = os.path.join(tmp, "home")  # the tree's scripts, for arch mode
        for part in ("models", "scripts", "hardware"):
            shutil.copytree(os.path.join(ROOT, part), os.path.join(home, part))
        for i in range(count):
            mode = r.choice(modes)
            env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1")
            if mode == "arch":
                args, made = mutate_arch(r, home)
                env["VRAMPLAN_HOME"] = home
            else:
                args, made = (mutate_config(r, base) if mode == "config" else mutate_set(r, keys) if mode == "set"
                              else mutate_script(r, base))
            args = ["estimate"] + args + ["--set", "seq_len=" + r.choice(["128", "512"]), "--json"]
            try:
                p = subprocess.run([EXE] + args, capture_output=True, text=True, timeout=60, env=env)
                problem = problem_of(p)
            except subprocess.TimeoutExpired:
                problem = "timeout"
            if problem:
                found += 1
                print(f"{i} {mode}: {problem}: vramplan {' '.join(args)}")
                if made:  # the input outlives the temporary folder, in the working directory
                    kept = f"fuzz-{seed}-{i}{os.path.splitext(made)[1]}"
                    with open(made) as src, open(kept, "w") as out:
                        out.write(src.read())
                    print(f"    input kept as {kept}")
            if mode == "arch":
                shutil.copy(os.path.join(ROOT, "models", "arch", os.path.basename(made)), made)
    print(f"{count} runs, {found} problems")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
