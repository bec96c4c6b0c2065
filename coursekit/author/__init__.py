"""For the course author: notebooks/ -> source/ -> release/, and the student packs."""
