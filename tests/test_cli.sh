#!/usr/bin/env bash
# CLI smoke tests: every subcommand, --help, --version, bad arguments -> exit 2 + one line on
# stderr (never a crash), capacity figures, inspect on hand-made record files.
# usage: test_cli.sh PATH/TO/mlakv
set -u
MLAKV=${1:?usage: test_cli.sh PATH/TO/mlakv}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0

ok() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAIL: $*" >&2; }

# run ARGS...: sets rc, out, err
run() {
    "$MLAKV" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    out=$(cat "$TMP/out")
    err=$(cat "$TMP/err")
}

# expect_ok DESC ARGS...: exit 0, no stderr
expect_ok() {
    local desc=$1; shift
    run "$@"
    if [ "$rc" -eq 0 ] && [ -z "$err" ]; then ok; else fail "$desc: mlakv $* -> rc $rc, stderr: $err"; fi
}

# expect_bad DESC ARGS...: exit 2, exactly one line on stderr, nothing on stdout
expect_bad() {
    local desc=$1; shift
    run "$@"
    local lines
    lines=$(printf '%s' "$err" | grep -c '' || true)
    if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && [ -z "$out" ]; then ok
    else fail "$desc: mlakv $* -> rc $rc (want 2), $lines stderr line(s) (want 1), stdout '${out:0:80}'"; fi
}

# expect_bad_msg DESC TEXT ARGS...: expect_bad, and the message contains TEXT
expect_bad_msg() {
    local desc=$1 text=$2; shift 2
    expect_bad "$desc" "$@"
    if printf '%s' "$err" | grep -qF -- "$text"; then ok; else fail "$desc: '$text' not in message: $err"; fi
}

# expect_in DESC TEXT: TEXT occurs in the last stdout
expect_in() {
    if printf '%s' "$out" | grep -qF -- "$2"; then ok; else fail "$1: '$2' not in output:"; printf '%s\n' "$out" | head -20 >&2; fi
}

# --- dispatcher ---------------------------------------------------------------------------
expect_ok "top help" --help
expect_in "top help lists commands" "capacity"
for c in formats capacity inspect demo eval; do expect_in "top help lists $c" "$c"; done
expect_ok "version" --version
expect_in "version string" "mlakv 0."
expect_bad "no command"
expect_bad "unknown command" frobnicate
expect_bad "unknown option" --frobnicate

# --- every subcommand: --help and a bad argument ------------------------------------------
for c in formats capacity inspect demo eval; do
    expect_ok "$c --help" "$c" --help
    expect_in "$c --help usage line" "usage: mlakv $c"
    expect_bad "$c with unknown option" "$c" --no-such-option
done

# --- formats -------------------------------------------------------------------------------
expect_ok "formats" formats
for f in "fp8_ds_mla " "nvfp4_ds_mla " "nvfp4_fp8_rope " "nvfp4_fp8_rope_token_scale "; do
    expect_in "formats lists $f" "$f"
done
for b in 656 432 368; do expect_in "formats bytes $b" " $b "; done
expect_bad "formats extra arg" formats extra

# --- capacity ------------------------------------------------------------------------------
expect_ok "capacity glm-5.2" capacity --model glm-5.2 --budget 40GiB
expect_in "glm-5.2 fp8 B/token" "54,728"
expect_in "glm-5.2 nvfp4 B/token" "37,032"
expect_in "budget bytes" "42,949,672,960"
expect_in "all formats side by side" "nvfp4_fp8_rope_token_scale"
expect_in "40GiB fp8 blocks" "12,262"
expect_ok "capacity one format" capacity --model glm-5.2 --budget 40GiB --format nvfp4_ds_mla
expect_in "one format" "nvfp4_ds_mla"
if printf '%s' "$out" | grep -q "fp8_ds_mla "; then fail "--format should show one format"; else ok; fi
expect_ok "capacity no-mtp" capacity --model glm-5.2 --budget 40GiB --no-mtp --format fp8_ds_mla
expect_in "no-mtp B/token = 78*656 + 21*132" "53,940"
expect_ok "capacity dcp" capacity --model deepseek-v3.2 --budget 80GB --dcp 8 --block-size 1 --format fp8_ds_mla
# 62*656 + 62*132 = 48856 B/token; 80e9 / 48856 = 1637465 tokens per GPU, x8
expect_in "deepseek bytes/token" "48,856"
expect_in "deepseek tokens/GPU" "1,637,465"
expect_in "deepseek dcp 8" "13,099,720"
for u in B KB KiB MB MiB GB GiB TB TiB gib 1.5GiB; do
    case $u in 1.5GiB) arg=$u ;; *) arg=3$u ;; esac
    expect_ok "budget unit $u" capacity --model glm-5 --budget "$arg"
done
expect_ok "budget 0" capacity --model glm-5 --budget 0B
expect_bad "budget without unit" capacity --model glm-5.2 --budget 40
if printf '%s' "$err" | grep -q "no unit.*40GiB.*B, KB, KiB, MB, MiB, GB, GiB, TB, TiB"; then ok
else fail "unit-less budget: message should name the units: $err"; fi
expect_ok "--opt=value" capacity --model=glm-5.2 --budget=40GiB --format=nvfp4_ds_mla
expect_in "--opt=value parsed" "37,032"
expect_bad "capacity positional" capacity --model glm-5.2 --budget 40GiB extra
expect_bad "no-mtp with value" capacity --model glm-5.2 --budget 40GiB --no-mtp=1
expect_bad "missing model" capacity --budget 40GiB
expect_bad "missing budget" capacity --model glm-5.2
expect_bad "unknown model" capacity --model glm-9 --budget 40GiB
expect_bad "bad budget unit" capacity --model glm-5.2 --budget 40XB
expect_bad "negative budget" capacity --model glm-5.2 --budget -1GiB
expect_bad "empty budget" capacity --model glm-5.2 --budget ""
expect_bad "budget too large" capacity --model glm-5.2 --budget 99999999999TiB
expect_bad "budget nan" capacity --model glm-5.2 --budget nan
expect_bad "budget hex" capacity --model glm-5.2 --budget 0x10
expect_bad "block size 0" capacity --model glm-5.2 --budget 40GiB --block-size 0
expect_bad "block size junk" capacity --model glm-5.2 --budget 40GiB --block-size 64x
expect_bad "dcp 0" capacity --model glm-5.2 --budget 40GiB --dcp 0
expect_bad "dcp negative" capacity --model glm-5.2 --budget 40GiB --dcp -2
expect_bad "dcp huge" capacity --model glm-5.2 --budget 40GiB --dcp 99999999999999999999
expect_bad "unknown format" capacity --model glm-5.2 --budget 40GiB --format nvfp5
expect_bad "option without value" capacity --model glm-5.2 --budget

# --- demo and eval (engineer B's commands): they run, and show every format --------------
expect_ok "demo" demo --tokens 256
for f in "fp8_ds_mla " "nvfp4_ds_mla " "nvfp4_fp8_rope " "nvfp4_fp8_rope_token_scale "; do
    expect_in "demo lists $f" "$f"
done
expect_in "demo glm-5.2 fp8 B/token" "54728"
expect_in "demo glm-5.2 nvfp4 B/token" "37032"
expect_bad "demo bad tokens" demo --tokens -5
expect_ok "eval small" eval --mags 0.02,2 --topk 64 --queries 1 --needles 2 --needle-context 4096 \
    --context 256 --heads 2 --quiet
expect_in "eval lists two-level" "nvfp4_fp8_rope_token_scale"
expect_bad "eval bad format" eval --formats nvfp5

# --- inspect -------------------------------------------------------------------------------
# A 432-B nvfp4_ds_mla cache of 3 records, all zero, then record 1 hand-made:
# latent byte 0 = 0x72 -> element 0 = +1.0 (nibble 2), element 1 = +6.0 (nibble 7);
# group scale 0 = 0x38 (E4M3 1.0), group scale 1 = 0x40 (2.0); RoPE[0] = bf16 0x3FC0 (1.5).
head -c $((3 * 432)) /dev/zero >"$TMP/nvfp4.bin"
printf '\x72' | dd of="$TMP/nvfp4.bin" bs=1 seek=432 conv=notrunc status=none
printf '\x38\x40' | dd of="$TMP/nvfp4.bin" bs=1 seek=$((432 + 256)) conv=notrunc status=none
printf '\xc0\x3f' | dd of="$TMP/nvfp4.bin" bs=1 seek=$((432 + 304)) conv=notrunc status=none
expect_ok "inspect zero record" inspect --format nvfp4_ds_mla "$TMP/nvfp4.bin" 0
expect_in "zero record padding" "all zero"
expect_ok "inspect hand-made record" inspect --format nvfp4_ds_mla "$TMP/nvfp4.bin" 1
expect_in "slot location" "slot 1"
expect_in "group 0 scale" "scale 38 = 1"
expect_in "group 1 scale" "scale 40 = 2"
expect_in "first values" " 1(2) 6(7)"
expect_in "latent max" "max 6"
expect_in "rope bf16" "1.5(3fc0)"
# non-zero padding in record 2 -> flagged, exit 1
printf '\x01' | dd of="$TMP/nvfp4.bin" bs=1 seek=$((2 * 432 + 290)) conv=notrunc status=none
run inspect --format nvfp4_ds_mla "$TMP/nvfp4.bin" 2
if [ "$rc" -eq 1 ] && printf '%s' "$out" | grep -q "!! padding"; then ok; else fail "non-zero padding not flagged (rc $rc)"; fi
# paged layout: block size 2, stride 1000 B -> slot 2 is at byte 1000
head -c 1500 /dev/zero >"$TMP/paged.bin"
printf '\x38' | dd of="$TMP/paged.bin" bs=1 seek=$((1000 + 256)) conv=notrunc status=none
expect_ok "inspect paged" inspect --format nvfp4_ds_mla --block-size 2 --block-stride 1000 "$TMP/paged.bin" 2
expect_in "paged offset" "file offset 1000"
expect_in "paged scale" "scale 38 = 1"
# every format decodes a zero record
for f in fp8_ds_mla nvfp4_ds_mla nvfp4_fp8_rope nvfp4_fp8_rope_token_scale; do
    head -c 656 /dev/zero >"$TMP/z.bin"
    expect_ok "inspect $f zero record" inspect --format "$f" "$TMP/z.bin" 0
done
expect_in "token scale field" "token scale s_t"
expect_bad "inspect slot beyond file" inspect --format nvfp4_ds_mla "$TMP/nvfp4.bin" 3
expect_bad "inspect huge slot" inspect --format nvfp4_ds_mla "$TMP/nvfp4.bin" 9223372036854775807
expect_bad "inspect slot overflow" inspect --format nvfp4_ds_mla "$TMP/nvfp4.bin" 99999999999999999999
expect_bad "inspect negative slot" inspect --format nvfp4_ds_mla "$TMP/nvfp4.bin" -1
expect_bad "inspect junk slot" inspect --format nvfp4_ds_mla "$TMP/nvfp4.bin" 1x
expect_bad "inspect no slot" inspect --format nvfp4_ds_mla "$TMP/nvfp4.bin"
expect_bad "inspect no format" inspect "$TMP/nvfp4.bin" 0
expect_bad "inspect unknown format" inspect --format fp4 "$TMP/nvfp4.bin" 0
expect_bad "inspect stride too small" inspect --format nvfp4_ds_mla --block-size 2 --block-stride 800 "$TMP/nvfp4.bin" 0
expect_bad "inspect stride without block size" inspect --format nvfp4_ds_mla --block-stride 900 "$TMP/nvfp4.bin" 0
expect_bad "inspect huge block size" inspect --format nvfp4_ds_mla --block-size 9223372036854775807 "$TMP/nvfp4.bin" 0
expect_bad "inspect extra arg" inspect --format nvfp4_ds_mla "$TMP/nvfp4.bin" 0 1
run inspect --format nvfp4_ds_mla "$TMP/does-not-exist" 0
if [ "$rc" -eq 1 ] && [ "$(printf '%s' "$err" | grep -c '')" -eq 1 ]; then ok; else fail "missing file: rc $rc"; fi
run inspect --format nvfp4_ds_mla "$TMP" 0
if [ "$rc" -eq 1 ]; then ok; else fail "directory as file: rc $rc"; fi

# records whose values decode to NaN or Inf (with scales that are themselves fine): flagged, exit 1
# bf16 RoPE NaN in a 432-B record
head -c 432 /dev/zero >"$TMP/nanrope.bin"
printf '\xc0\x7f' | dd of="$TMP/nanrope.bin" bs=1 seek=$((304 + 6)) conv=notrunc status=none
run inspect --format nvfp4_ds_mla "$TMP/nanrope.bin" 0
if [ "$rc" -eq 1 ] && printf '%s' "$out" | grep -q "!! 1 RoPE value(s) decode to NaN or +-Inf"; then ok
else fail "NaN RoPE not flagged (rc $rc)"; fi
# two-level record: s_t = FLT_MAX, scale byte 448, nibble 6 -> latent +Inf
head -c 368 /dev/zero >"$TMP/inflat.bin"
printf '\x07' | dd of="$TMP/inflat.bin" bs=1 seek=0 conv=notrunc status=none
printf '\x7e' | dd of="$TMP/inflat.bin" bs=1 seek=256 conv=notrunc status=none
printf '\xff\xff\x7f\x7f' | dd of="$TMP/inflat.bin" bs=1 seek=292 conv=notrunc status=none
run inspect --format nvfp4_fp8_rope_token_scale "$TMP/inflat.bin" 0
if [ "$rc" -eq 1 ] && printf '%s' "$out" | grep -q "!! 1 latent value(s) decode to +-Inf"; then ok
else fail "Inf latent not flagged (rc $rc)"; fi
# static 368-B record: RoPE scale FLT_MAX, byte 448 -> RoPE +Inf
head -c 368 /dev/zero >"$TMP/infrope.bin"
printf '\xff\xff\x7f\x7f' | dd of="$TMP/infrope.bin" bs=1 seek=288 conv=notrunc status=none
printf '\x7e' | dd of="$TMP/infrope.bin" bs=1 seek=310 conv=notrunc status=none
run inspect --format nvfp4_fp8_rope "$TMP/infrope.bin" 0
if [ "$rc" -eq 1 ] && printf '%s' "$out" | grep -q "!! 1 RoPE value(s) decode to NaN or +-Inf"; then ok
else fail "Inf RoPE not flagged (rc $rc)"; fi

# --- capacity at the top of the uint64 range: prints the budget it computes with ------------
expect_ok "capacity max budget" capacity --model glm-5.2 --budget 18446744073709551615B --format fp8_ds_mla
expect_in "max budget printed unclamped" "(18,446,744,073,709,551,615 B)"
expect_in "max budget tokens from the full budget" "337,062,272,944,512"

# --- eval with degenerate settings: every metric defined (no nan) ---------------------------
run eval --topk 1 --context 1 --queries 1 --needles 0 --heads 1 --mags 1 --formats nvfp4_ds_mla
if [ "$rc" -eq 0 ] && ! printf '%s\n%s' "$out" "$err" | grep -qi "nan"; then ok
else fail "degenerate eval: rc $rc or a nan in its output:"; printf '%s\n%s\n' "$out" "$err" | head -8 >&2; fi
run eval --topk 1 --context 1 --queries 1 --needles 0 --heads 1 --mags 1 --formats nvfp4_ds_mla --csv "$TMP/deg.csv"
if [ "$rc" -eq 0 ] && ! grep -qi "nan" "$TMP/deg.csv"; then ok; else fail "degenerate eval csv has a nan"; fi

# --- calibrate: .npy layers -> calibration JSON; bad inputs and files rejected, nothing written --
# npy NAME DESCR ROWS COLS BYTE: a .npy of ROWS x COLS elements, every byte BYTE (hex)
npy() {
    local hdr="{'descr': '$2', 'fortran_order': False, 'shape': ($3, $4), }"
    while [ $(( (10 + ${#hdr} + 1) % 64 )) -ne 0 ]; do hdr="$hdr "; done
    local len=$(( ${#hdr} + 1 )) esz=4
    [ "$2" = "<f2" ] && esz=2
    { printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $((len & 255)))\\x$(printf %02x $((len >> 8)))";
      printf '%s\n' "$hdr"; head -c $(( $3 * $4 * esz )) /dev/zero | tr '\0' "\\$(printf %03o $((16#$5)))"; } >"$1"
}
mkdir -p "$TMP/cal"
npy "$TMP/cal/a.npy" "<f4" 3 512 3c     # 0x3c3c3c3c = 0.01149 (float32)
npy "$TMP/cal/b.npy" "<f2" 2 576 2c     # 0x2c2c = 0.06519 (float16)
expect_ok "calibrate dir" calibrate -o "$TMP/cal.json" "$TMP/cal"
expect_in "calibrate wrote" "wrote"
expect_ok "calibrate check" calibrate --check "$TMP/cal.json"
expect_in "calibrate 2 layers" "2 layers"
expect_in "calibrate layer 0 max" "max_abs 0.0114889704"
expect_in "calibrate layer 1 max" "max_abs 0.0651855469"
if grep -q '"format": "nvfp4_ds_mla_outer_scale_v1", "num_layers": 2, "latent_dim": 512, "denominator": 2688.0' "$TMP/cal.json"; then ok; else fail "calibration JSON header"; fi
expect_ok "calibrate files to stdout" calibrate "$TMP/cal/b.npy" "$TMP/cal/a.npy"
expect_in "calibrate stdout order" '"max_abs": [0.0651855469'
npy "$TMP/nan.npy" "<f4" 1 512 ff       # NaN samples
run calibrate -o "$TMP/nan.json" "$TMP/nan.npy"
if [ "$rc" -eq 1 ] && [ ! -e "$TMP/nan.json" ] && printf '%s' "$err" | grep -q "finite"; then ok; else fail "calibrate NaN: rc $rc, $err"; fi
npy "$TMP/f8.npy" "<f8" 1 512 00
run calibrate -o "$TMP/f8.json" "$TMP/f8.npy"
if [ "$rc" -eq 1 ] && [ ! -e "$TMP/f8.json" ]; then ok; else fail "calibrate f8 accepted"; fi
npy "$TMP/w.npy" "<f4" 2 100 00
run calibrate -o "$TMP/w.json" "$TMP/w.npy"
if [ "$rc" -eq 1 ] && [ ! -e "$TMP/w.json" ]; then ok; else fail "calibrate 100 columns accepted"; fi
expect_bad "calibrate no input" calibrate
expect_bad "calibrate bad option" calibrate --bogus
for bad in 's/_v1"/_v2"/' 's/"num_layers": 2/"num_layers": 3/' 's/"scales": \[[^,]*,/"scales": [0,/' \
           's/"scales": \[[^,]*,/"scales": [-1e-3,/' 's/"latent_dim": 512/"latent_dim": 576/' \
           's/"denominator": 2688.0/"denominator": 448/' 's/}$/,}/' 's/"max_abs"/"max_abs2"/' \
           's/^{//' 's/"scales": \[[^,]*,/"scales": [1e999,/'; do
    sed "$bad" "$TMP/cal.json" >"$TMP/bad.json"
    run calibrate --check "$TMP/bad.json"
    if [ "$rc" -eq 1 ] && [ -n "$err" ]; then ok; else fail "calibration file edited by '$bad' accepted"; fi
done

# --- option syntax shared by every command (getopt_long): --opt=value, missing values, unknown
# and ambiguous options, stray operands ------------------------------------------------------
for c in formats capacity inspect demo eval calibrate; do
    expect_bad_msg "$c unknown option named" "'--no-such-option'" "$c" --no-such-option
    expect_bad_msg "$c unknown short option named" "'-Z'" "$c" -Z
    expect_bad_msg "$c help with value" "--help takes no value" "$c" --help=1
done
expect_bad_msg "capacity missing value names the option" "--model needs a value" capacity --budget 40GiB --model
expect_bad_msg "capacity flag with value" "--no-mtp takes no value" capacity --model glm-5.2 --budget 40GiB --no-mtp=1
expect_bad_msg "formats operand" "unexpected argument 'extra'" formats extra

# demo
run demo --tokens=256 --seed=3 --budget-gib=80 --model=deepseek-v3.2
cp "$TMP/out" "$TMP/demo_eq"
if [ "$rc" -eq 0 ] && [ -z "$err" ]; then ok; else fail "demo --opt=value: rc $rc, $err"; fi
expect_in "demo --opt=value parsed" "256 synthetic tokens per layer (seed 3); capacity for deepseek-v3.2, 80 GiB"
run demo --tokens 256 --seed 3 --budget-gib 80 --model deepseek-v3.2
if cmp -s "$TMP/out" "$TMP/demo_eq"; then ok; else fail "demo: --opt=value and --opt value differ"; fi
expect_ok "demo abbreviated option, hex seed" demo --tok 128 --seed 0x10
expect_in "demo hex seed" "(seed 16)"
for o in --tokens --seed --budget-gib --model; do
    expect_bad_msg "demo $o missing value" "$o needs a value" demo $o
done
expect_bad_msg "demo tokens=0" "--tokens '0'" demo --tokens=0
expect_bad_msg "demo tokens junk" "--tokens '12x'" demo --tokens 12x
expect_bad_msg "demo tokens empty" "--tokens ''" demo --tokens=
expect_bad_msg "demo budget 0" "--budget-gib '0'" demo --budget-gib 0
expect_bad_msg "demo budget nan" "--budget-gib 'nan'" demo --budget-gib nan
expect_bad_msg "demo negative seed" "--seed '-1'" demo --seed=-1
expect_bad_msg "demo seed overflow" "--seed '18446744073709551616'" demo --seed 18446744073709551616
expect_bad_msg "demo unknown model" "unknown model 'glm-9'" demo --model glm-9
expect_bad_msg "demo operand" "unexpected argument 'extra'" demo extra
expect_bad_msg "demo operand after --" "unexpected argument '--tokens'" demo -- --tokens 5

# eval: every value option in both spellings (tiny runs), errors name the option
EV="--mags 0.5 --topk 16 --queries 1 --needles 2 --needle-context 4096 --context 64 --heads 2 --quiet"
run eval $EV --formats nvfp4_ds_mla --seed 5 --whiten 0.25 --needle-margin 2 --mode exact --threads 1 --csv "$TMP/e1.csv"
grep -v '^(' "$TMP/out" >"$TMP/e1"
run eval --mags=0.5 --topk=16 --queries=1 --needles=2 --needle-context=4096 --context=64 --heads=2 --quiet \
    --formats=nvfp4_ds_mla --seed=5 --whiten=0.25 --needle-margin=2 --mode=exact --threads=1 --csv="$TMP/e2.csv"
grep -v '^(' "$TMP/out" >"$TMP/e2"
if [ "$rc" -eq 0 ] && cmp -s "$TMP/e1" "$TMP/e2" && cmp -s "$TMP/e1.csv" "$TMP/e2.csv"; then ok
else fail "eval: --opt=value and --opt value differ (rc $rc)"; fi
expect_in "eval --opt=value parsed" "seed 5, 1 queries x 2 heads, topk 16, context 64 tokens, 2 needle trials"
expect_in "eval --opt=value parsed (2)" "lead 2 nats), whiten 0.25, decode mode exact"
expect_in "eval --formats=" "nvfp4_ds_mla+s_l"
if printf '%s' "$out" | grep -q "^fp8_ds_mla "; then fail "eval --formats= should select one format"; else ok; fi
run eval $EV --formats fp8_ds_mla --no-variants
expect_in "eval --no-variants" "fp8_ds_mla"
if [ "$rc" -eq 0 ] && ! printf '%s' "$out" | grep -q "+accurate"; then ok; else fail "eval --no-variants (rc $rc)"; fi
run eval --format nvfp4_fp8_rope_token_scale --no-var $EV
if [ "$rc" -eq 0 ] && printf '%s' "$out" | grep -q "^nvfp4_fp8_rope_token_scale " \
   && ! printf '%s' "$out" | grep -q "+accurate"; then ok; else fail "eval abbreviations --format, --no-var (rc $rc)"; fi
for o in --formats --mags --seed --heads --topk --queries --context --needles --needle-context \
         --needle-margin --whiten --mode --threads --input --input-dtype --csv; do
    expect_bad_msg "eval $o missing value" "$o needs a value" eval $o
done
expect_bad_msg "eval topk=0" "--topk '0' is not an integer in [1, 1048576]" eval --topk=0
expect_bad_msg "eval heads too many" "--heads '1025'" eval --heads 1025
expect_bad_msg "eval needles negative" "--needles '-1'" eval --needles=-1
expect_bad_msg "eval threads junk" "--threads '2x'" eval --threads 2x
expect_bad_msg "eval needle-context small" "--needle-context '4095'" eval --needle-context 4095
expect_bad_msg "eval whiten > 1" "--whiten '1.5' is not a number in [0, 1]" eval --whiten=1.5
expect_bad_msg "eval margin 0" "--needle-margin '0'" eval --needle-margin 0
expect_bad_msg "eval mags entry" "--mags entry 'x'" eval --mags 1,x
expect_bad_msg "eval mags inf" "--mags entry 'inf'" eval --mags inf
expect_bad_msg "eval mags empty" "--mags is empty" eval --mags=,
expect_bad_msg "eval mode" "--mode 'fast'" eval --mode fast
expect_bad_msg "eval input dtype" "--input-dtype 'f16'" eval --input-dtype=f16
expect_bad_msg "eval seed" "--seed 'abc'" eval --seed abc
expect_bad_msg "eval format name" "unknown format 'nvfp5'" eval --formats=nvfp4_ds_mla,nvfp5
expect_bad_msg "eval context < topk" "--context 16 < --topk 64" eval --context 16 --topk 64
expect_bad_msg "eval ambiguous option" "'--needle' is ambiguous" eval --needle 3
expect_bad_msg "eval flag with value" "--quiet takes no value" eval --quiet=1
expect_bad_msg "eval operand" "unexpected argument 'extra'" eval extra
expect_bad_msg "eval operand after options" "unexpected argument '5'" eval --quiet 5

# inspect: options before, between or after FILE and SLOT; '--' ends the options
expect_ok "inspect --format=" inspect --format=nvfp4_ds_mla "$TMP/nvfp4.bin" 1
expect_in "inspect --format= record" " 1(2) 6(7)"
expect_ok "inspect options after operands" inspect "$TMP/nvfp4.bin" 1 --format nvfp4_ds_mla
expect_in "inspect options after operands: slot" "slot 1"
expect_ok "inspect option between operands" inspect "$TMP/nvfp4.bin" --format nvfp4_ds_mla 1
expect_in "inspect option between operands: record" " 1(2) 6(7)"
expect_ok "inspect paged, --opt=value" inspect "$TMP/paged.bin" --block-size=2 2 --block-stride=1000 --format=nvfp4_ds_mla
expect_in "inspect paged, --opt=value: offset" "file offset 1000"
expect_ok "inspect --" inspect --format nvfp4_ds_mla -- "$TMP/nvfp4.bin" 1
expect_in "inspect --: slot" "slot 1"
for o in --format --block-size --block-stride; do
    expect_bad_msg "inspect $o missing value" "$o needs a value" inspect "$TMP/nvfp4.bin" 0 $o
done
expect_bad_msg "inspect block size 0" "--block-size '0'" inspect --format nvfp4_ds_mla --block-size=0 "$TMP/nvfp4.bin" 0
expect_bad_msg "inspect stride junk" "--block-stride 'x'" inspect --format nvfp4_ds_mla --block-size 2 --block-stride=x "$TMP/nvfp4.bin" 0
expect_bad_msg "inspect negative slot after --" "SLOT '-1' is not an integer >= 0" inspect --format nvfp4_ds_mla -- "$TMP/nvfp4.bin" -1
expect_bad_msg "inspect third operand" "unexpected argument '7'" inspect "$TMP/nvfp4.bin" 0 --format nvfp4_ds_mla 7
expect_bad_msg "inspect unknown option after operands" "'--bogus'" inspect "$TMP/nvfp4.bin" 0 --bogus

# calibrate: -o FILE, -oFILE, --out FILE, --out=FILE, options after the inputs, --check=FILE
for form in "-o $TMP/c1.json" "-o$TMP/c2.json" "--out $TMP/c3.json" "--out=$TMP/c4.json"; do
    expect_ok "calibrate $form" calibrate $form "$TMP/cal/a.npy" "$TMP/cal/b.npy"
done
expect_ok "calibrate -o after the inputs" calibrate "$TMP/cal/a.npy" "$TMP/cal/b.npy" --out "$TMP/c5.json"
for i in 2 3 4 5; do
    if cmp -s "$TMP/c1.json" "$TMP/c$i.json"; then ok; else fail "calibrate output c$i.json differs from c1.json"; fi
done
expect_ok "calibrate --check=" calibrate --check="$TMP/c1.json"
expect_in "calibrate --check= layers" "2 layers"
expect_ok "calibrate -- input" calibrate -o "$TMP/c6.json" -- "$TMP/cal"
expect_bad_msg "calibrate -o missing value" "-o needs a value" calibrate "$TMP/cal" -o
expect_bad_msg "calibrate --out missing value" "--out needs a value" calibrate "$TMP/cal" --out
expect_bad_msg "calibrate --check missing value" "--check needs a value" calibrate --check
expect_bad_msg "calibrate --check with inputs" "--check FILE takes no input files" calibrate --check "$TMP/c1.json" "$TMP/cal"
expect_bad_msg "calibrate --check with -o" "--check FILE takes no -o/--out" calibrate --check "$TMP/c1.json" -o "$TMP/c7.json"
if [ ! -e "$TMP/c7.json" ]; then ok; else fail "calibrate --check with -o wrote a file"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
