"""Tests of the tests against real vLLM (marker real_vllm) and the launch guard that keeps them one at a time."""
