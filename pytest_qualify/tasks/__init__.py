"""The task builders: fixture data, lane haystacks, the media corpus, hostile requests. Data in, requests out; no grading."""
