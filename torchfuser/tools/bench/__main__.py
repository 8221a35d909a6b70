"""`python -m torchfuser.tools.bench`: see torchfuser.tools.bench."""

from torchfuser.tools.bench import main

raise SystemExit(main())
