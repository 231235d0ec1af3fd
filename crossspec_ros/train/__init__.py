"""Training and evaluation of the bundled tiny drafter/verifier pair (tools layer)."""
