"""The driver's room: what runs in the program that receives every worker's stream.

subscriber (the socket, its receive thread, seq-loss counts, worker states), clock (clock
offsets of other hosts), live (the live rows), frames (the async iterator of frames).
"""
