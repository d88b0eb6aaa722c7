"""Developer tooling (documentation generators and checks); not used at run time."""
