"""What every room uses: running nbgrader and forked commands, and writing files safely."""
