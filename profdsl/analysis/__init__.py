"""Reading what was captured: streaming trace reading, listing, checking, summarizing,
merging and plotting (the ``profdsl`` analysis commands)."""
