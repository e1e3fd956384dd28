"""Bad and hostile input, at the command line and at the Python API: refused at once, in one clear line.

Every case is listed, with its outcome, in docs/bad-inputs.md: the table there is generated from
the cases below (`python tests/test_bad_inputs.py` prints it) and a test checks that it is current.
Each case is run in this process (`flowsim.cli.main`): nothing here compiles a computation, since
every refusal comes before one, except the one tiny run that shows a numerical failure's outcome.
"""

import hashlib
import json
import shlex
import sys
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

import flowsim._memory
import flowsim.cli
import flowsim.results
from flowsim import slr
from flowsim._checks import InvalidInput
from flowsim.cli import main
from flowsim.tasks import latent, sparse
from flowsim.tasks.slr.cli import _attention, _record
from tests.shared import command_in_this_process

REPOSITORY = Path(__file__).resolve().parent.parent
DOC = REPOSITORY / "docs" / "bad-inputs.md"

#: Command-line cases: (arguments, exit status, the start of the one line on stderr). {file} is a
#: regular file, {earlier} a folder holding an earlier run, {foreign} a non-empty folder of other files,
#: {overlong} a folder name longer than file systems allow.
CLI_CASES = [
    ("nonsense", 2, "flowsim: error: argument command: invalid choice: 'nonsense'"),
    # A task's command is named by its choices, not by the parser's internal name for it.
    ("latent", 2, "flowsim latent: error: the following arguments are required: {{error,risk,mixture,learn}}"),
    ("latent --L 4", 2, "flowsim latent: error: argument {{error,risk,mixture,learn}}: invalid choice: '4' (choose"),
    ("verify --bogus", 2, "flowsim verify: error: unrecognized arguments: --bogus (see flowsim verify --help)"),
    (
        "sgd --setps 3",
        2,
        "flowsim sgd: error: unrecognized arguments: --setps 3 (did you mean --steps? see flowsim sgd --help)",
    ),
    (
        "flow --t-maks 5 --t-end 5",
        2,
        "flowsim flow: error: unrecognized arguments: --t-maks 5 --t-end 5 (did you mean --t-max? see flowsim flow",
    ),
    ("portrait --d abc", 2, "flowsim portrait: error: argument --d: invalid int value: 'abc'"),
    (
        "sgd --d -3",
        2,
        "flowsim sgd: error: --d must be an integer in [5, 2**53] (every command: SGD on the overlaps needs",
    ),
    (
        "flow --d 3",
        2,
        "flowsim flow: error: --d must be an integer in [5, 2**53] (every command: SGD on the overlaps needs",
    ),
    ("demo --L 0", 2, "flowsim demo: error: --L must be an integer in [1, 2**31 - 1], got 0"),
    ("flow --lam nan", 2, "flowsim flow: error: --lam must be a number in [1e-50, 1e50], got nan"),
    ("flow --t-max 0", 2, "flowsim flow: error: --t-max must be a finite number > 0, got 0.0"),
    # A subnormal number is 0 in XLA's compiled programs: the save times would not increase.
    (
        "flow --t-max 1e-320",
        2,
        "flowsim flow: error: --t-max must be a finite number > 0, got 1e-320: a subnormal number, which flowsim's "
        "compiled programs read as 0 (the smallest normal float64 is 2.225e-308)",
    ),
    # Above 1e50 the risk's squares and fourth powers overflow; L^2 is computed in int64.
    ("sgd --gamma 1e308", 2, "flowsim sgd: error: --gamma must be a number in [1e-50, 1e50], got 1e+308"),
    ("demo --eps 1e51", 2, "flowsim demo: error: --eps must be a number in [0, 1e50], got 1e+51"),
    ("flow --L 1000000000000", 2, "flowsim flow: error: --L must be an integer in [1, 2**31 - 1], got 1000000000000"),
    (
        "compare --lr 1e308",
        2,
        "flowsim compare: error: lr * steps must be finite (the run's time at its end), got lr = 1e+308, steps = 2000",
    ),
    # An option read only with another: given alone, the run would leave out the part it was given for.
    (
        "portrait --basin-n 10",
        2,
        "flowsim portrait: error: --basin-n is read only with --basins: add --basins, or leave --basin-n out",
    ),
    (
        "advantage --maps erf --rule-points 8192",
        2,
        "flowsim advantage: error: --rule-points is read only for a map other than erf in --maps at --L > 4 (erf's "
        "risk is closed-form; up to L = 4 the rule is a product rule): add such a map, or raise --L, or leave "
        "--rule-points out",
    ),
    (
        "latent error --kernel-max-L 0 --kernel-replicates 50",
        2,
        "flowsim latent error: error: --kernel-replicates is read only where --kernel-max-L reaches one of --Ls (the "
        "comparison's lengths): raise --kernel-max-L, or leave --kernel-replicates out",
    ),
    ("verify --min-share 1.5", 2, "flowsim verify: error: --min-share must be a number in [0, 1], got 1.5"),
    # A distance of 1 or more in the overlaps' cosines would count far-off end points as converged.
    ("verify --tol 2", 2, "flowsim verify: error: --tol must be a number in (0, 1), got 2.0"),
    ("compare --attractor-tol 5", 2, "flowsim compare: error: --attractor-tol must be a number in (0, 1), got 5.0"),
    (
        "flow --seed 1180591620717411303424",
        2,
        "flowsim flow: error: --seed must be an integer in [0, 2**63 - 1], got 1180591620717411303424",
    ),
    ("flow --seed -1", 2, "flowsim flow: error: --seed must be an integer in [0, 2**63 - 1], got -1"),
    ("flow --init 2,0,0,0,0", 2, "flowsim flow: error: --init 2,0,0,0,0: overlaps point (the only one)"),
    ("flow --init 1,2,3", 2, "flowsim flow: error: argument --init: must be sphere or manifold or 5 comma-separated"),
    ("flow --out ''", 2, "flowsim flow: error: argument --out: must name a folder, got ''"),
    ("flow --out {file}/results", 2, "flowsim flow: error: cannot write results into"),
    ("flow --out {earlier}", 2, "flowsim flow: error: {earlier} holds an earlier run (flowsim flow, started"),
    ("flow --out {foreign} --replace", 2, "flowsim flow: error: cannot write results into {foreign}: it is not empty"),
    # A run.json is the user's data: a name outside the folder is never deleted, whatever the record says.
    (
        "flow --out {escaping} --replace",
        2,
        "flowsim flow: error: the run record {escaping}/run.json is damaged (it lists '../x.csv', which is not a "
        "file name inside the folder): flowsim neither deletes nor resumes what it cannot trust",
    ),
    (
        "verify --out {earlier} --resume --replace",
        2,
        "flowsim verify: error: --resume and --replace (resume=True, replace=True) contradict each other",
    ),
    (
        "flow --out {overlong}",
        2,
        "flowsim flow: error: cannot write results into {overlong}: File name too long (results need a folder that "
        "can be written)",
    ),
    ("sgd --mode online --n 100", 2, "flowsim sgd: error: --n is the dataset size of --mode dataset: --mode online"),
    ("sparse sweep --span 0", 2, "flowsim sparse sweep: error: --span must be a number in (1, 1e4], got 0.0"),
    ("sparse sweep --span 1e300", 2, "flowsim sparse sweep: error: --span must be a number in (1, 1e4], got 1e+300"),
    ("sparse sweep --Ts 2", 2, "flowsim sparse sweep: error: --Ts must each be an integer > --s = 3, got 2"),
    (
        "sparse sweep --learners head mlp --mlp-Ts 3",
        2,
        "flowsim sparse sweep: error: --mlp-Ts must each be an integer > --s = 3, got 3",
    ),
    (
        "sparse sweep --mlp-Ts 8",
        2,
        "flowsim sparse sweep: error: --mlp-Ts gives the mlp's input lengths: add mlp to "
        "--learners, or leave --mlp-Ts out",
    ),
    (
        "sparse sweep --learners l1 --lr 0.1",
        2,
        "flowsim sparse sweep: error: --lr is read only for a trained learner (head, mlp or transformer): add one to "
        "--learners, or leave --lr out",
    ),
    (
        "sparse sweep --learners l1 --budgets 100",
        2,
        "flowsim sparse sweep: error: --budgets is read only for a trained learner (head, mlp or transformer): add "
        "one to --learners, or leave --budgets out",
    ),
    (
        "sparse sweep --budgets 1000 --max-steps 100",
        2,
        "flowsim sparse sweep: error: --max-steps is read only with a 'converged' budget of a trained learner: add "
        "converged to --budgets (and a trained learner to --learners), or leave --max-steps out",
    ),
    (
        "sparse sweep --mlp-span 4",
        2,
        "flowsim sparse sweep: error: --mlp-span is read only with the MLP: add mlp to --learners, or leave "
        "--mlp-span out",
    ),
    (
        "sparse sweep --erm-trials {E}",
        2,
        "flowsim sparse sweep: error: this run would take about 1.1e+05 days "
        "(estimated before starting: the ERM identifiability ({E} trials x 5 T, 496 tokens in all) alone about "
        "1.1e+05 days), more than 1 h: lower --erm-trials; or ask for it with --yes",
    ),
    (
        "sparse sweep --Ts 1000000000",
        2,
        "flowsim sparse sweep: error: this run would need about 1.84e+03 TiB of "
        "memory, {more}: the l1's training sets (60 runs x m 704 x T 1000000000, three copies) alone take 922 TiB; "
        "lower --Ts, --seeds or --candidates",
    ),
    (
        "sparse sweep --budgets {E}",
        2,
        "flowsim sparse sweep: error: this run would take about 2.9e+06 days "
        "(estimated before starting: the head's training ({E} steps x 3 rounds x 60 runs x 3 searches at 5 T) alone "
        "about 2.9e+06 days), more than 1 h",
    ),
    (
        "sparse sweep --seeds {E}",
        2,
        "flowsim sparse sweep: error: this run would need about 1.2e+07 TiB of memory, "
        "{more}: the l1's training sets (6000000000000 runs x m 176 x T 256, three copies) alone take 5.9e+06 TiB",
    ),
    (
        "latent error --Ls 0",
        2,
        "flowsim latent error: error: argument --Ls: must be comma-separated values, each an integer >= 1, got '0'",
    ),
    ("latent risk --sigma 0", 2, "flowsim latent risk: error: --sigma must be a number in [1e-50, 1e50], got 0.0"),
    # The overflowing tilt is refused in one line, without NumPy's overflow warnings before it.
    (
        "latent risk --norms 1e308",
        2,
        "flowsim latent risk: error: --norms must give sigma^2 |a|^2 <= 700 (its e^(...) in the predicted limit a "
        "float64), got sigma^2 |a|^2 = inf at |a| = 1e+308",
    ),
    ("latent learn --eps 1e308", 2, "flowsim latent learn: error: --eps must be a number in [0, 1e50], got 1e+308"),
    (
        "latent mixture --n-test 1",
        2,
        "flowsim latent mixture: error: --n-test must be an integer >= 2, got 1",
    ),
    (
        "latent error --kernel-max-L 65536",
        2,
        "flowsim latent error: error: this run would need about 12.5 TiB of memory, more than the 16 GiB available "
        "on this machine: the Gram matrices (200 sequences x L 65536 x L 65536) alone take 12.5 TiB; lower "
        "--kernel-max-L or --kernel-replicates",
    ),
    (
        "latent learn --Ls 65536 --ns 100000",
        2,
        "flowsim latent learn: error: this run would need about 1.65 TiB of memory, more than the 16 GiB available "
        "on this machine: the sequences (4 seeds x (n 100000 + 8000 held out) x L 65536 x d 4) alone take 1.65 TiB; "
        "lower --ns, --Ls or --seeds",
    ),
    ("sgd --mode dataset", 2, "flowsim sgd: error: --engine overlaps runs online SGD only: --mode dataset needs"),
    ("sgd --mode dataset --engine rd", 2, "flowsim sgd: error: --mode dataset needs --n, the dataset size"),
    # Refused before the estimate is said (one line), naming the options as typed.
    (
        "sgd --mode dataset --engine rd --n 7 --batch 5",
        2,
        "flowsim sgd: error: --batch 5 must divide --n 7, the dataset size of --mode dataset",
    ),
    # Options no part of the run would read (`read_only`).
    (
        "sgd --mode population --engine rd --batch 3",
        2,
        "flowsim sgd: error: --batch is read only by --mode online and dataset (the population gradient takes no "
        "samples): take another --mode, or leave --batch out",
    ),
    (
        "flow --alpha 0.1",
        2,
        "flowsim flow: error: --alpha is read only with --decay above 0 (the schedule's clock): add --decay, or leave "
        "--alpha out",
    ),
    (
        "portrait --trajectories 0 --t-max 5",
        2,
        "flowsim portrait: error: --t-max is read only with --trajectories above 0: raise --trajectories, or leave "
        "--t-max out",
    ),
    # The streamline grid holds about 20 values per point at its peak (benchmarks/portrait_memory.py): 21.5 GiB.
    (
        "portrait --grid 12000",
        2,
        "flowsim portrait: error: this run would need about 21.5 GiB of memory, more than the 16 GiB available on "
        "this machine: the streamline grid (12000 x 12000 points, 20 values each) alone take 21.5 GiB; lower --grid",
    ),
    (
        "latent error --norms 0.5,1e-320",
        2,
        "flowsim latent error: error: argument --norms: must be comma-separated values, each a finite number >= 0, "
        "got '0.5,1e-320': 1e-320 is a subnormal number, which flowsim's compiled programs read as 0 (the smallest "
        "normal float64 is 2.225e-308)",
    ),
    ("sgd --steps 100 --log-every 7", 2, "flowsim sgd: error: --log-every 7 must divide --steps 100"),
    ("sgd --dtype float16", 2, "flowsim sgd: error: argument --dtype: invalid choice: 'float16'"),
    (
        "sgd --batch 2000000000 --steps 1 --log-every 1 --seeds 1",
        2,
        "flowsim sgd: error: this run would need about 685 GiB of memory, more than the 16 GiB available on this "
        "machine: the random numbers of one step (1 seeds x batch 2000000000 x 23 values, twice) alone take 685 GiB; "
        "lower --batch or --seeds",
    ),
    (
        "sgd --steps {E} --log-every 1 --seeds 1",
        2,
        "flowsim sgd: error: this run would need about 116 TiB of memory, more than the 16 GiB available on this "
        "machine: the logged values (1 seeds x 1000000000001 logs x 8 values, twice) alone take 116 TiB; raise "
        "--log-every",
    ),
    (
        "sgd --engine rd --batch 100000 --d 100000 --steps 1 --log-every 1 --seeds 1",
        2,
        "flowsim sgd: error: this run would need about 2.18 TiB of memory, more than the 16 GiB available on this "
        "machine: the samples of one step (1 seeds x batch 100000 x L 10 x d 100000, three copies) alone take "
        "2.18 TiB; lower --batch, --seeds or --d, or use the overlap engine",
    ),
    # Sizes: every size a command takes is estimated (memory, then time) before its folder is made.
    (
        "flow --saves {E}",
        2,
        "flowsim flow: error: this run would need about 2.79e+03 TiB of memory, {more}: the "
        "saved states (--n x --saves: 16 trajectories x {E} saved times) alone take 2.79e+03 TiB; lower --n or --saves",
    ),
    (
        "flow --n {E}",
        2,
        "flowsim flow: error: this run would need about 3.5e+04 TiB of memory, {more}: the saved "
        "states (--n x --saves: {E} trajectories x 201 saved times) alone take 3.5e+04 TiB; lower --n or --saves",
    ),
    (
        "portrait --grid 1000000",
        2,
        "flowsim portrait: error: this run would need about 146 TiB of memory, {more}: "
        "the streamline grid (1000000 x 1000000 points, 20 values each) alone take 146 TiB; lower --grid",
    ),
    (
        "portrait --basins --basin-n {E}",
        2,
        "flowsim portrait: error: this run would need about 1.8e+04 TiB of "
        "memory, {more}: the saved states (--basin-n: {E} trajectories x 101 saved times) alone take 1.8e+04 TiB; "
        "lower --basin-n",
    ),
    (
        "verify --n {E}",
        2,
        "flowsim verify: error: this run would need about 4.2e+05 TiB of memory, {more}: the "
        "saved states (3 settings x 2 kinds of start x --n: 6000000000000 trajectories x 401 saved times) alone take "
        "4.2e+05 TiB; lower --n or --saves",
    ),
    (
        "reproduce --seeds {E}",
        2,
        "flowsim reproduce: error: this run would need about 1.8e+05 TiB of memory, "
        "{more}: the saved states (init_manifold, --seeds: {E} trajectories x 201 saved times) alone take 3.5e+04 "
        "TiB; lower --seeds",
    ),
    (
        "advantage --rule-points 1099511627776",
        2,
        "flowsim advantage: error: this run would need about 2e+04 TiB of "
        "memory, {more}: the rule (1099511627776 points x L 10, and the scores of a batch of starts) alone take 2e+04 "
        "TiB; lower --rule-points",
    ),
    (
        "advantage --starts {E}",
        2,
        "flowsim advantage: error: this run would need about 3.2e+04 TiB of memory, "
        "{more}: the saved states (42 runs of map and lam: {E} trajectories x 168 saved times) alone take 2.9e+04 "
        "TiB; lower --starts or --lams",
    ),
    (
        "advantage --d {E}",
        2,
        "flowsim advantage: error: this run would need about 9e+05 TiB of memory, {more}: a "
        "batch of the Bayes risk's samples (4096 x L 10 x d {E}, three copies) alone take 8.9e+05 TiB; lower --d",
    ),
    (
        "advantage --bayes-samples {E}",
        2,
        "flowsim advantage: error: this run would need about 14.6 TiB of memory, "
        "{more}: the Bayes risk's losses ({E} samples) alone take 14.6 TiB; lower --bayes-samples",
    ),
    (
        "advantage --t-max 1000000000 --lr 1e-9",
        2,
        "flowsim advantage: error: this run would take about 1.6e+11 days "
        "(estimated before starting: 42 SGD runs: SGD (overlaps engine: 64 seeds x 1000000000000000000 steps x "
        "batch 5) alone about 1.6e+11 days), more than 1 h: lower --starts, --batch or --t-max (or raise --lr); or "
        "ask for it with --yes",
    ),
    (
        "demo --sgd-steps {E}",
        2,
        "flowsim demo: error: this run would take about 4.6e+02 days (estimated before "
        "starting: SGD (overlaps engine: 8 seeds x {E} steps x batch 5) alone about 4.6e+02 days), more than 1 h: "
        "lower --sgd-seeds or --sgd-steps; or ask for it with --yes",
    ),
    (
        "latent error --Ls {E}",
        2,
        "flowsim latent error: error: this run would need about 138 TiB of memory, {more}: "
        "a chunk of sequences (1 x L {E} x 19 values) alone take 138 TiB; lower the largest L (--Ls)",
    ),
    (
        "latent error --replicates {E}",
        2,
        "flowsim latent error: error: this run would need about 65.5 TiB of memory, "
        "{more}: the squared errors (3 x {E} sequences, three copies) alone take 65.5 TiB; lower --replicates",
    ),
    (
        "latent risk --d 1000000000",
        2,
        "flowsim latent risk: error: this run would need about 2.3e+04 TiB of memory, "
        "{more}: a chunk of sequences (16 x L 65536 x 3000000000 values) alone take 2.3e+04 TiB; lower the largest L "
        "(--Ls) or --d",
    ),
    (
        "latent mixture --n-train {E}",
        2,
        "flowsim latent mixture: error: this run would need about 7.58e+03 TiB of "
        "memory, {more}: the sequences ((n {E} + 4000) x L 256 x d 2, twice) alone take 7.45e+03 TiB; lower "
        "--n-train or --n-test, or the largest L (--Ls)",
    ),
    (
        "latent mixture --Ls 100000000",
        2,
        "flowsim latent mixture: error: this run would need about 23.3 TiB of "
        "memory, {more}: the sequences ((n 4000 + 4000) x L 100000000 x d 2, twice) alone take 23.3 TiB",
    ),
    (
        "latent mixture --heads 1000000000",
        2,
        "flowsim latent mixture: error: this run would need about 349 TiB of "
        "memory, {more}: the heads' outputs ((n 4000 + 4000) x 1000000000 heads x d 2, three copies) alone take 349 "
        "TiB; lower --n-train or --n-test, or the most heads (--heads)",
    ),
    (
        "latent learn --steps {E}",
        2,
        "flowsim latent learn: error: this run would take about 5.3e+07 days (estimated "
        "before starting: gradient descent (4 seeds x {E} steps x batch 2000 x L 1024 x d 4) alone about 3e+07 days), "
        "more than 1 h: lower --steps, --seeds, --ns or --Ls; or ask for it with --yes",
    ),
    # Numbers at the edge, and options named in every refusal.
    (
        "latent error --bandwidth 1e-300",
        2,
        "flowsim latent error: error: --bandwidth must be a number in [1e-50, 1e50], got 1e-300",
    ),
    (
        "latent risk --sigma 1e-300",
        2,
        "flowsim latent risk: error: --sigma must be a number in [1e-50, 1e50], got 1e-300",
    ),
    (
        "latent risk --sigma 1e-7",
        2,
        "flowsim latent risk: error: --sigma / --tau must be in [1e-06, 1e+06] (float64 resolves the noise), got 1e-07",
    ),
    ("latent risk --tau 1e300", 2, "flowsim latent risk: error: --tau must be a number in [1e-50, 1e50], got 1e+300"),
    (
        "latent error --norms 1000",
        2,
        "flowsim latent error: error: --norms must give a^T Sigma a <= 700 (its e^(...) "
        "in the predicted limit a float64), got a^T Sigma a = 6.716e+05 at |a| = 1000",
    ),
    (
        "advantage --lams -1,2",
        2,
        "flowsim advantage: error: argument --lams: must be comma-separated values, each a "
        "number in [1e-50, 1e50], got '-1,2'",
    ),
    (
        "flow --attention softmax --L 100000000",
        2,
        "flowsim flow: error: --L must be at most 21201 with --attention "
        "softmax (its risk is taken by a Sobol' rule over the L scores, which has at most 21201 dimensions), got "
        "100000000",
    ),
    # A numerical failure: exit status 1, the failure said, the results and the figure kept (a tiny run).
    (
        "latent learn --Ls 4 --ns 8 --steps 10 --seeds 1 --lr 1e6",
        1,
        "flowsim latent learn: numerical failure: diverged: L = 4, n = 8: the training risk",
    ),
    ("compare --reference nothing", 2, "flowsim compare: error: argument --reference: invalid choice: 'nothing'"),
    ("reproduce --only nothing", 2, "flowsim reproduce: error: argument --only: invalid choice: 'nothing'"),
    (
        "advantage --lr 1e-300 --t-max 1e10",
        2,
        "flowsim advantage: error: t_max / lr = inf SGD steps is not a finite number (t_max = 1e+10, lr = 1e-300)",
    ),
    (
        "flow --attention capped",
        2,
        "flowsim flow: error: argument --attention: 'capped' is not a built-in map (erf, softmax, linear, softplus, "
        "sigmoid, relu) nor FILE.py:NAME or MODULE:NAME",
    ),
    (
        "flow --attention no-such-file.py:capped",
        2,
        "flowsim flow: error: argument --attention: no-such-file.py:capped: there is no file no-such-file.py",
    ),
    (
        "sgd --attention flowsim.tasks.slr:Problem",
        2,
        "flowsim sgd: error: --attention flowsim.tasks.slr:Problem: Problem in flowsim.tasks.slr must be a "
        "flowsim.slr.AttentionMap, got the class Problem",
    ),
    # lam within what the map's flow and a researcher's map allow (tests/test_edges_numerics.py).
    (
        "flow --attention linear --lam 1e13",
        2,
        "flowsim flow: error: lam must be at most 1e+12 for linear attention (its flow cannot be solved beyond: "
        "slr.LARGEST_LAM), got 1e+13",
    ),
    (
        "portrait --attention {maps}:nan_beyond --lam 50 --L 3 --d 20",
        2,
        "flowsim portrait: error: AttentionMap 'nan beyond': f is not finite at x = -558.114 (nan); at lam = 50, "
        "d = 20, gamma = 0.707107 the scores reach 558: it must be finite at every score from -558 to 558",
    ),
    (
        "advantage --maps softmax,no_such_module:capped",
        2,
        "flowsim advantage: error: argument --maps: no_such_module:capped: there is no module no_such_module (to "
        "import: installed, or on PYTHONPATH)",
    ),
    (
        "advantage --maps softmax,{maps}:capped --out {edited} --resume",
        2,
        "flowsim advantage: error: cannot resume the run in {edited}: {maps} has changed since (SHA-256 "
        "{was}... then, {now}... now): resume with the file as that run read it, or give another folder",
    ),
    (
        "advantage --maps erf,sofmax",
        2,
        "flowsim advantage: error: argument --maps: 'sofmax' is not a built-in map (erf, softmax, linear,",
    ),
]

#: {E} in the cases: a size far beyond any machine.
E = "1000000000000"
#: What the memory estimates compare with (`sixteen_gib`), as the refusals say it.
MORE = "more than the 16 GiB available on this machine"

PROBLEM = slr.Problem(d=20, L=4, lam=0.5)


def _api_cases():
    """Python API cases: (the call as shown, a function making it, the exception, the start of its message)."""
    return [
        (
            "Problem(20, 3, 1e13, attention='linear')",
            lambda: slr.Problem(20, 3, 1e13, attention="linear"),
            ValueError,
            "lam must be at most 1e+12 for linear attention",
        ),
        (
            "population_risk(problem, np.zeros(4))",
            lambda: slr.population_risk(PROBLEM, np.zeros(4)),
            ValueError,
            "overlaps must have a last axis of size 5",
        ),
        (
            "population_risk(problem, np.zeros((3, 6)))",
            lambda: slr.population_risk(PROBLEM, np.zeros((3, 6))),
            ValueError,
            "overlaps must have a last axis of size 5",
        ),
        (
            "population_risk(problem, [2, 0, 0, 0, 0])",
            lambda: slr.population_risk(PROBLEM, [2.0, 0, 0, 0, 0]),
            ValueError,
            "overlaps point (the only one) = (kappa=2, nu=0, theta=0, eta=0, rho=0) has an entry outside [-1, 1]",
        ),
        (
            "population_risk(problem, [nan, 0, 0, 0, 0])",
            lambda: slr.population_risk(PROBLEM, [np.nan, 0, 0, 0, 0]),
            ValueError,
            "overlaps point (the only one) = (kappa=nan, nu=0, theta=0, eta=0, rho=0) has a non-finite entry",
        ),
        (
            "verify_convergence(tol=1.0)",
            lambda: slr.verify_convergence(tol=1.0),
            InvalidInput,
            "tol must be a number in (0, 1), got 1.0",
        ),
        (
            "problem.approaching(ys, velocity, tol=5.0)",
            lambda: PROBLEM.approaching(np.zeros((1, 5)), np.zeros((1, 5)), 5.0),
            InvalidInput,
            "tol must be a number in (0, 1), got 5.0",
        ),
        (
            "run_sgd(problem, key='a', ...)",
            lambda: slr.run_sgd(PROBLEM, "a", lr=1e-3, steps=1),
            ValueError,
            "key must be a JAX PRNG key, jax.random.key(seed), or an integer seed in [0, 2**63 - 1], got 'a'",
        ),
        (
            "run_sgd(problem, key=2**64, ...)",
            lambda: slr.run_sgd(PROBLEM, 2**64, lr=1e-3, steps=1),
            ValueError,
            "key (an integer seed) must be an integer in [0, 2**63 - 1], got 18446744073709551616",
        ),
        (
            "run_sgd(problem, 0, batch=2_000_000_000, engine='overlaps', ...)",
            lambda: slr.run_sgd(PROBLEM, 0, lr=1e-3, steps=1, batch=2_000_000_000, engine="overlaps"),
            ValueError,
            "run_sgd would need about",
        ),
        (
            "statistical_advantage(0, bayes_samples=10**12)",
            lambda: slr.statistical_advantage(0, bayes_samples=10**12),
            InvalidInput,
            "statistical_advantage would need about 14.6 TiB of memory, more than the 16 GiB available on this "
            "machine: the Bayes risk's losses (1000000000000 samples) alone take 14.6 TiB; lower bayes_samples",
        ),
        (
            "statistical_advantage(0, lams=[])",
            lambda: slr.statistical_advantage(0, lams=[]),
            InvalidInput,
            "lams must hold at least one inverse temperature, got none",
        ),
        (
            'SparseTarget(T=64, s=40, function="random")',
            lambda: sparse.SparseTarget(T=64, s=40, function="random"),
            InvalidInput,
            "SparseTarget.s must be at most 24 (g's truth table has 2^s entries), got 40",
        ),
        (
            "information_limit(16, 20)",
            lambda: sparse.information_limit(16, 20),
            InvalidInput,
            "s must be at most T = 16 (an s-sparse function of T bits), got 20",
        ),
        (
            'TiltedGaussian("abc")',
            lambda: latent.TiltedGaussian("abc"),
            InvalidInput,
            "TiltedGaussian.Sigma must be an array of numbers, got 'abc'",
        ),
        (
            "mixture_posterior(0, mixture, [4], n_test=1)",
            lambda: latent.mixture_posterior(0, latent.LocationMixture(np.zeros((2, 1))), [4], n_test=1),
            InvalidInput,
            "n_test must be an integer >= 2, got 1",
        ),
        (
            "attention_error(0, TiltedGaussian(np.eye(2)), np.zeros(3), ...)",
            lambda: latent.attention_error(0, latent.TiltedGaussian(np.eye(2)), np.zeros(3), np.zeros(2), [4]),
            InvalidInput,
            "location must have shape (d,) = (2,), got (3,)",
        ),
        (
            "softmax_attention(np.zeros(2), np.zeros((4, 3)), np.zeros((4, 1)))",
            lambda: latent.softmax_attention(np.zeros(2), np.zeros((4, 3)), np.zeros((4, 1))),
            InvalidInput,
            "softmax_attention takes a (..., d), keys (..., L, d) and values (..., L, d_v), got shapes (2,), (4, 3) "
            "and (4, 1)",
        ),
        (
            "Problem(d=5.5, L=4, lam=0.5)",
            lambda: slr.Problem(d=5.5, L=4, lam=0.5),
            ValueError,
            "Problem.d must be an integer in [2, 2**53], got 5.5",
        ),
        (
            "Problem(d=20, L=3, lam=0.5).vector_field(0.0, np.ones(4))",
            lambda: slr.Problem(d=20, L=3, lam=0.5).vector_field(0.0, np.ones(4)),
            ValueError,
            "y must hold the 5 state values (kappa, nu, theta, eta, rho) on its last axis, got shape (4,)",
        ),
        (
            "run_experiment(EXPERIMENTS[0], 0, m0=np.zeros((2, 5)))",
            lambda: slr.run_experiment(slr.EXPERIMENTS[0], 0, m0=np.zeros((2, 5))),
            ValueError,
            "m0 must have shape (seeds, 5) = (30, 5), got (2, 5)",
        ),
        *_array_cases(),
    ]


#: Hidden directions in R^8 for the array cases: NumPy vectors, so that no case compiles a program.
TRUTH = slr.GroundTruth(*np.eye(8)[:2])
NAN = np.full(8, np.nan)


def _array_cases():
    """The arguments of the public array functions: shapes, finiteness and domains, refused at the boundary
    instead of a silent NaN, a wrong number or JAX's own error from inside a computation (issue 54)."""
    k, v, X = TRUTH.k_star, TRUTH.v_star, np.zeros((2, 3, 8))
    return [
        (
            "vectors_with_overlaps([1, 1, 1, 1, 1], truth, 0)",
            lambda: slr.vectors_with_overlaps([1.0, 1, 1, 1, 1], TRUTH, 0),
            InvalidInput,
            "overlaps point (the only one) = (kappa=1, nu=1, theta=1, eta=1, rho=1) is not realizable",
        ),
        (
            "vectors_with_overlaps([2, 0, 0, 0, 0], truth, 0)",
            lambda: slr.vectors_with_overlaps([2.0, 0, 0, 0, 0], TRUTH, 0),
            InvalidInput,
            "overlaps point (the only one) = (kappa=2, nu=0, theta=0, eta=0, rho=0) has an entry outside [-1, 1]",
        ),
        (
            "population_risk(problem, np.array([0.5 + 1j, 0, 0, 0, 0]))",
            lambda: slr.population_risk(PROBLEM, np.array([0.5 + 1j, 0, 0, 0, 0])),
            InvalidInput,
            "overlaps must hold real numbers, got complex ones (complex128)",
        ),
        (
            "overlaps(np.full(8, nan), v, truth)",
            lambda: slr.overlaps(NAN, v, TRUTH),
            InvalidInput,
            "k must hold finite numbers, got nan at index (0,)",
        ),
        (
            "overlaps(np.ones(7), v, truth)  # truth in R^8",
            lambda: slr.overlaps(np.ones(7), v, TRUTH),
            InvalidInput,
            "k must have shape (..., d) with d = 8, truth's dimension, got (7,)",
        ),
        (
            "predict(np.zeros((2, 3, 8)), np.full(8, nan), v, 0.5)",
            lambda: slr.predict(X, NAN, v, 0.5),
            InvalidInput,
            "k must hold finite numbers, got nan at index (0,)",
        ),
        (
            "empirical_risk(np.full((2, 3, 8), nan), np.zeros(2), k, v, 0.5)",
            lambda: slr.empirical_risk(np.full((2, 3, 8), np.nan), np.zeros(2), k, v, 0.5),
            InvalidInput,
            "X must hold finite numbers, got nan at index (0, 0, 0)",
        ),
        (
            "empirical_risk(np.zeros((2, 3, 7)), np.zeros(2), k, v, 0.5)  # k, v in R^8",
            lambda: slr.empirical_risk(np.zeros((2, 3, 7)), np.zeros(2), k, v, 0.5),
            InvalidInput,
            "X must have shape (..., L, d) with L >= 1 tokens and d = 8, k's size, got (2, 3, 7)",
        ),
        (
            "empirical_risk(np.zeros((2, 3, 8)), np.zeros(3), k, v, 0.5)",
            lambda: slr.empirical_risk(X, np.zeros(3), k, v, 0.5),
            InvalidInput,
            "y must have shape (2,), one label per sequence of X (at least one), got (3,)",
        ),
        (
            "softmax_attention(np.full(2, nan), np.ones((4, 2)), np.ones((4, 1)))",
            lambda: latent.softmax_attention(np.full(2, np.nan), np.ones((4, 2)), np.ones((4, 1))),
            InvalidInput,
            "a must hold finite numbers, got nan at index (0,)",
        ),
        (
            "softmax_attention(np.ones(2), np.ones((0, 2)), np.ones((0, 1)))",
            lambda: latent.softmax_attention(np.ones(2), np.ones((0, 2)), np.ones((0, 1))),
            InvalidInput,
            "keys must have shape (..., L, d) with L >= 1 tokens, got (0, 2)",
        ),
        (
            "nadaraya_watson(np.zeros(2), np.full((4, 2), nan), np.ones((4, 1)), 0.5)",
            lambda: latent.nadaraya_watson(np.zeros(2), np.full((4, 2), np.nan), np.ones((4, 1)), 0.5),
            InvalidInput,
            "keys must hold finite numbers, got nan at index (0, 0)",
        ),
        (
            "kernel_attention(np.zeros(2), np.eye(2), np.ones((2, 1)), 0.5, ridge=-1)",
            lambda: latent.kernel_attention(np.zeros(2), np.eye(2), np.ones((2, 1)), 0.5, ridge=-1),
            InvalidInput,
            "ridge must be a number in [1e-50, 1e50], got -1",
        ),
        (
            "gaussian_kernel(np.ones(2), np.zeros(2), bandwidth=0)",
            lambda: latent.gaussian_kernel(np.ones(2), np.zeros(2), bandwidth=0),
            InvalidInput,
            "bandwidth must be a number in [1e-50, 1e50], got 0",
        ),
        (
            "fit_l1(np.full((4, 8), nan), np.ones(4))",
            lambda: sparse.fit_l1(np.full((4, 8), np.nan), np.ones(4)),
            InvalidInput,
            "x must hold finite numbers, got nan at index (0, 0)",
        ),
        (
            "fit_scaling([16, 16, 16], [5, 6, 7])",
            lambda: sparse.fit_scaling([16, 16, 16], [5, 6, 7]),
            InvalidInput,
            "T must hold at least 2 distinct values, as many as the parameters of the laws a + b ln T, a + b T, "
            "a T^b, got [16.0, 16.0, 16.0]",
        ),
        (
            "success_rates([[nan, 1]])",
            lambda: sparse.success_rates([[np.nan, 1]]),
            InvalidInput,
            "success must hold booleans (or 0 and 1), got nan at index (0, 0)",
        ),
    ]


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """{file}, {earlier}, {foreign}, {overlong}: a regular file, an earlier run's folder, a folder of other files,
    a name of 300 bytes; {edited}, an interrupted `advantage` run with a researcher's map {maps}, edited since."""
    base = tmp_path_factory.mktemp("places")
    (base / "file").write_text("")
    earlier = base / "earlier"
    earlier.mkdir()
    record = {
        "schema": flowsim.results.SCHEMA,
        "command": "flowsim flow",
        "started": "2026-11-24T12:00:00Z",
        "status": "ok",
        "files": ["x.csv"],
    }
    (earlier / "run.json").write_text(json.dumps(record))
    (earlier / "x.csv").write_text("x\n1\n")
    foreign = base / "foreign"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("")
    # The record as the command makes it (the map loaded, nothing computed).
    maps, edited = base / "maps.py", base / "edited"
    source = b"import jax.numpy as jnp\nfrom flowsim import slr\n"
    source += b'capped = slr.AttentionMap("capped", log_f=lambda x: jnp.minimum(x, 1.0), normalisation="tokens")\n'
    # NaN beyond the scores checked when a map is made (-100 to 100): refused where a problem's scores reach it.
    source += b'nan_beyond = slr.AttentionMap("nan beyond", lambda x: jnp.where(abs(x) < 150, jnp.tanh(x), jnp.nan))\n'
    maps.write_bytes(source)
    parser = flowsim.cli._parser()
    args, _ = parser.parse_known_args(["advantage", "--maps", f"softmax,{maps}:capped", "--out", str(edited)])
    _attention(f"{maps}:capped", "--maps")  # as the command does: its maps loaded, then the record made
    _record(args).finish("interrupted")
    maps.write_bytes(source + b"# edited\n")
    was, now = (hashlib.sha256(text).hexdigest()[:12] for text in (source, source + b"# edited\n"))
    # Looking for a folder name longer than file systems allow (255 bytes) used to be an internal error.
    overlong = base / ("x" * 300)
    escaping = base / "escaping"
    escaping.mkdir()
    (escaping / "run.json").write_text(json.dumps({**record, "files": ["x.csv", "../x.csv"]}))
    (base / "x.csv").write_text("a user's table")
    return {
        "file": base / "file",
        "earlier": earlier,
        "foreign": foreign,
        "overlong": overlong,
        "escaping": escaping,
        "maps": maps,
        "edited": edited,
        "was": was,
        "now": now,
    }


@pytest.fixture(autouse=True)
def sixteen_gib(monkeypatch, tmp_path):
    """The memory checks compare with 16 GiB, whatever this machine has: the same refusals everywhere. In a
    scratch folder: a case that was not refused would leave its default --out there, not in the checkout."""
    monkeypatch.setattr(flowsim._memory, "available_bytes", lambda: (16 * 2**30, "available on this machine"))
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(("arguments", "status", "message"), CLI_CASES, ids=[case[0] for case in CLI_CASES])
def test_the_command_line_refuses_in_one_line(capsys, places, arguments, status, message):
    try:
        returned = main(shlex.split(arguments.format(**places, E=E)))
    except SystemExit as exit:  # argparse's own refusals
        returned = exit.code
    captured = capsys.readouterr()
    assert returned == status
    assert captured.err.startswith(message.format(**places, more=MORE, E=E)), captured.err
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err + captured.out
    if status == 1:  # a numerical failure keeps what was computed, the figure included
        assert list(Path("flowsim-out").rglob("*.png")) and list(Path("flowsim-out").rglob("*.csv"))


def test_a_refused_replacement_leaves_the_earlier_run(places):
    assert sorted(path.name for path in places["earlier"].iterdir()) == ["run.json", "x.csv"]
    assert [path.name for path in places["foreign"].iterdir()] == ["thesis.tex"]
    assert (places["escaping"].parent / "x.csv").read_text() == "a user's table"


@pytest.mark.parametrize("case", range(len(_api_cases())), ids=[case[0] for case in _api_cases()])
def test_the_api_refuses_with_a_message_naming_the_field(case):
    _, call, exception, message = _api_cases()[case]
    with pytest.raises(exception) as raised:
        call()
    assert str(raised.value).startswith(message), str(raised.value)


def test_numpy_scalars_and_integer_seeds_are_taken_as_they_mean():
    """NumPy integers for the static sizes (no equinox warning), an int seed for a key: the same results."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        problem = slr.Problem(d=np.int64(20), L=np.int32(4), lam=np.float64(0.5))
    assert (problem.d, problem.L, float(problem.lam)) == (20, 4, 0.5)
    assert type(problem.d) is int and type(problem.L) is int
    target = sparse.SparseTarget(T=np.int64(16), s=np.int32(3))
    assert (target.T, target.s, target.p) == (16, 3, 2.0 ** (-1 / 3))
    by_seed = slr.initial_overlaps(7, 20, 3)
    np.testing.assert_array_equal(by_seed, slr.initial_overlaps(jax.random.key(7), 20, 3))
    # The realizability check is skipped under tracing and with check=False, never the shape check.
    assert float(slr.population_risk(PROBLEM, [2.0, 0, 0, 0, 0], check=False)) > 0
    gradient = jax.grad(lambda m: slr.population_risk(PROBLEM, m))(jax.numpy.array([0.5, 0.5, 0, 0, 0]))
    assert np.isfinite(gradient).all()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("FLOWSIM_HOST_DEVICES", "100000", "FLOWSIM_HOST_DEVICES must be at most 1024 (XLA starts every CPU device"),
        ("SLURM_STEP_NUM_TASKS", "x", "SLURM_STEP_NUM_TASKS must be an integer, got 'x'"),
    ],
)
def test_the_environment_is_checked_in_one_line(monkeypatch, capsys, variable, value, message):
    """A bad device count or SLURM task count: exit status 2 and one line, before any device is started."""
    monkeypatch.setenv(variable, value)
    monkeypatch.setattr("sys.argv", ["flowsim", "flow", "--n", "1"])
    assert command_in_this_process(monkeypatch) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def markdown() -> str:
    """docs/bad-inputs.md: the cases and their outcomes, as tables."""
    lines = [
        "# Bad input and its outcome",
        "",
        "Every case of tests/test_bad_inputs.py, which checks each outcome and that this page is current",
        "(regenerate it with `python tests/test_bad_inputs.py > docs/bad-inputs.md`). Each is refused",
        "before anything is computed or written, with one line naming the option or field and what it",
        "accepts (exit status 2): a size by the estimate of the run's memory and time made before any work",
        "(time above an hour is refused unless --yes asks for it). A numerical failure is exit status 1:",
        "it is said where it happened, and the results computed, figures included, are kept. In the",
        "arguments, {file} stands for a regular file, {earlier} for a folder holding an earlier run,",
        "{foreign} for a non-empty folder of other files, {overlong} for a folder name longer than file systems",
        "allow (300 bytes), {escaping} for an earlier run whose run.json lists a file outside it, {maps} for a",
        "researcher's map file (`capped`, and `nan_beyond`: NaN beyond |x| = 150) and {edited} for the folder of an",
        "interrupted `advantage` run that used it, the file",
        "edited since ({was} and {now}: the start of its SHA-256 then and now).",
        "",
        "Numbers are bounded where flowsim's arithmetic needs it. A nonzero number below 2.2e-308 in size",
        "(subnormal) is refused everywhere: XLA's compiled programs read it as 0. For the attention task, lam,",
        "gamma and eps are at most 1e50 (their squares and fourth powers stay float64 numbers), L at most",
        "2^31 - 1 (the flow computes L^2 in int64) and d at most 2^53 (exact in float64).",
        "",
        f"## Command line ({len(CLI_CASES)} cases)",
        "",
        "| arguments | exit status | stderr begins with |",
        "|---|---:|---|",
    ]
    for arguments, status, message in CLI_CASES:
        arguments, message = arguments.replace("{E}", E), message.replace("{more}", MORE).replace("{E}", E)
        message = message.replace("{{", "{").replace("}}", "}")  # str.format's escapes, as the user reads them
        lines.append(f"| `flowsim {arguments}` | {status} | `{message}` |")
    cases = _api_cases()
    lines += [
        "",
        f"## Python API ({len(cases)} cases)",
        "",
        "| call | raises | message begins with |",
        "|---|---|---|",
    ]
    lines += [f"| `{call}` | {exception.__name__} | `{message}` |" for call, _, exception, message in cases]
    return "\n".join(lines) + "\n"


def test_the_documented_table_is_current():
    assert DOC.read_text() == markdown(), f"run: {sys.executable} tests/test_bad_inputs.py > docs/bad-inputs.md"


if __name__ == "__main__":
    print(markdown(), end="")
