#!/usr/bin/env python3
"""Starts torchft's Lighthouse (the real one, `torchft_lighthouse`) without importing torch.

torchft's console script imports the torchft package, whose __init__ loads
torch (about 4 s); the Lighthouse itself is Rust in torchft._torchft and
needs none of it, so this loads that extension module alone and runs its
lighthouse_main with the same options:

  scripts/lighthouse.py --min_replicas 2 [--bind [::]:29510] [--join_timeout_ms 60000]
                        [--quorum_tick_ms 100] [--heartbeat_timeout_ms 5000]

Its dashboard is http://HOST:PORT/ (the bind address). Titan's replica
groups reach it through fault_tolerance.lighthouse or TORCHFT_LIGHTHOUSE.
"""
import glob
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig

sys.dont_write_bytecode = True


def load_torchft_extension():
    roots = [sysconfig.get_paths()["platlib"]] + [p for p in sys.path if p.endswith("site-packages")]
    for root in roots:
        found = glob.glob(os.path.join(root, "torchft", "_torchft*.so"))
        if found:
            loader = importlib.machinery.ExtensionFileLoader("torchft._torchft", found[0])
            spec = importlib.util.spec_from_file_location("torchft._torchft", found[0], loader=loader)
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            return module
    sys.exit("scripts/lighthouse.py: torchft is not installed in this Python (" + sys.executable +
             "); run scripts/setup.sh, or use .venv/bin/python")


if __name__ == "__main__":
    # lighthouse_main reads the process's own arguments after the program name.
    load_torchft_extension().lighthouse_main()
