"""The lifelong stage loop (train task t, evaluate, select the checkpoint, save), its metrics and `clbench train`."""
