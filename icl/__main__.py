"""`python -m icl`: the `icl` command (icl.console), for an environment without its script."""

from icl.console import main

raise SystemExit(main())
